"""The week's checks, checked. `python -m pytest -q exercises` passes on a student's copy at every
stage: untouched stubs, half done, all done, and with or without exercises/solutions/.

- Every item fails on the stubs as they ship. The suite builds those stubs itself
  (`check.unwritten`), so a student's filled-in files never stand in for them.
- Every item passes on the reference solutions, and an unwritten stretch goal never fails a day.
- Each check catches the plausible mistakes in MISTAKES.
- No handout names a file that the copy lacks.
What needs the solutions is skipped in a students' copy (`python -m exercises.students_copy DEST`).
"""
import ast
import functools
import glob
import importlib
import importlib.util
import json
import math
import re
import statistics
import types
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from scipy import stats

from exercises.check import DAYS, check, day_checks, evaluate, unwritten

HERE = Path(__file__).parent
ROOT = HERE.parent
# Day 3's run items read a training run: the committed fp32 run of day 3's command, seed 0.
RUN = ROOT / "lab/results/course/train-fp32-s0"


def run_for(day: int) -> str:
    if day != 3:
        return ""
    if not (RUN / "checkpoint.pt").exists():
        pytest.skip(f"{RUN} is not in this copy")
    return str(RUN)


def solutions(day: int):
    """The day's reference solutions; the test is skipped in a students' copy, which has none."""
    return pytest.importorskip("exercises.solutions." + DAYS[day],
                               reason="exercises/solutions/ is not in this copy (a students' copy)")


@functools.cache
def items(day: int) -> list:
    return day_checks(day).items(run_for(day))


def statuses(day: int, yours) -> list:
    return [(item, evaluate(item, yours)[0]) for item in items(day)]


def functions_in(path: Path) -> dict:
    """{name: parameter names} of the top-level functions of a file, read without running it."""
    tree = ast.parse(path.read_text())
    return {node.name: [a.arg for a in node.args.args] for node in tree.body if isinstance(node, ast.FunctionDef)}


@pytest.mark.parametrize("day", sorted(DAYS))
def test_the_students_file_defines_what_its_check_calls(day):
    """The stubs the suite builds stand for the student's file: the same functions, the same parameters."""
    checks = day_checks(day)
    try:
        found = functions_in(HERE / f"{DAYS[day]}.py")
    except SyntaxError as e:  # a student's file mid-edit: the check command, not the suite, reports on it
        pytest.skip(f"exercises/{DAYS[day]}.py does not parse yet: {e}")
    missing = [name for name in (*checks.WRITE, *checks.STRETCH) if name not in found]
    assert not missing, f"exercises/{DAYS[day]}.py lacks {missing}"
    if importlib.util.find_spec("exercises.solutions") is not None:
        reference = functions_in(HERE / "solutions" / f"{DAYS[day]}.py")
        for name in (*checks.WRITE, *checks.STRETCH):
            assert found[name] == reference[name], (name, found[name], reference[name])


@pytest.mark.parametrize("day", sorted(DAYS))
def test_every_item_fails_on_the_stubs(day):
    """The stubs as they ship: a day's items FAIL, its stretch goal's items SKIP, none passes."""
    results = statuses(day, unwritten(day))
    assert results
    assert all(status == ("SKIP" if item.stretch else "FAIL") for item, status in results), \
        [(item.name, status) for item, status in results]
    assert any(item.stretch for item, _ in results) == bool(day_checks(day).STRETCH)


@pytest.mark.parametrize("day", sorted(DAYS))
def test_every_item_passes_on_the_solutions(day):
    results = check(day, run=run_for(day), yours=solutions(day))
    assert results and all(status == "PASS" for status, _ in results), \
        "\n".join(line for status, line in results if status != "PASS")


@pytest.mark.parametrize("day", [day for day in sorted(DAYS) if day_checks(day).STRETCH])
def test_an_unwritten_stretch_goal_never_fails_the_day(day):
    """The solutions with the stretch goal's functions left as stubs: every item passes or SKIPs."""
    stubs = unwritten(day)
    half = types.SimpleNamespace(**(vars(solutions(day)) | {n: getattr(stubs, n) for n in day_checks(day).STRETCH}))
    results = statuses(day, half)
    assert all(status == ("SKIP" if item.stretch else "PASS") for item, status in results), \
        [(item.name, status) for item, status in results if status != "PASS"]


# Plausible mistakes, written out where they cannot be one wrapper around the solution.
def space_to_depth_hw_swapped(images):
    B, C, H, W = images.shape
    x = images.reshape(B, C, W // 2, 2, H // 2, 2)  # H and W swapped: right only when H == W
    return x.permute(0, 2, 4, 3, 5, 1).reshape(B, H // 2, W // 2, 4 * C)


def space_to_depth_colors_outer(images):
    blocks = [images[:, :, di::2, dj::2] for di in (0, 1) for dj in (0, 1)]  # 4 x [B, C, H/2, W/2]
    return torch.stack(blocks, dim=2).flatten(1, 2).permute(0, 2, 3, 1)  # channel c * 4 + pixel


def mhsa_conv_wrong(softmax_axis=-1, pad=True):
    def mhsa_conv(x, centers, W, alpha):
        rows, cols = x.shape[2:]
        p = math.isqrt(len(centers)) // 2 if pad else 0
        keys = F.pad(x, (p, p, p, p))
        B, _, Hp, Wp = keys.shape
        pos = torch.cartesian_prod(torch.arange(Hp), torch.arange(Wp)).to(x)
        delta = pos[None, :] - pos[:, None]
        logits = torch.stack([-alpha * ((delta - c) ** 2).sum(-1) for c in centers])  # [heads, T, T]
        P = logits.softmax(softmax_axis)
        y = torch.einsum("hqk,bki,hio->boq", P, keys.flatten(2).transpose(1, 2), W)
        return y.view(B, -1, Hp, Wp)[:, :, p:p + rows, p:p + cols]
    return mhsa_conv


def separable_probs_wrong(layout_ok=True, subtract_max=True):
    def separable_probs(centers, alpha, H, W):
        def axis_probs(n, axis):
            pos = torch.arange(n, dtype=centers.dtype)
            logits = -alpha[:, None, None] * (pos[None, :] - pos[:, None] - centers[:, axis, None, None]) ** 2
            if subtract_max:
                return logits.softmax(-1)
            return logits.exp() / logits.exp().sum(-1, keepdim=True)  # 0 / 0 once every exp underflows
        pattern = "hac,hbd->habcd" if layout_ok else "hac,hbd->hacbd"
        return torch.einsum(pattern, axis_probs(H, 0), axis_probs(W, 1)).reshape(len(centers), H * W, H * W)
    return separable_probs


def largest_smallest(inv_cov):
    smallest, largest = torch.linalg.eigvalsh(inv_cov.double()).unbind(-1)
    return largest, smallest


def degenerate_wrong(eigenvalue_at_threshold=False, condition_at_threshold=False, smallest_judged=False,
                     diagonal=False, singular_kept=False, fixed_condition=False):
    def degenerate(inv_cov, eigenvalue_below=1e-5, condition_above=1e5):
        if diagonal:
            values = inv_cov.double().diagonal(dim1=-2, dim2=-1)
            largest, smallest = values.max(-1).values, values.min(-1).values
        else:
            largest, smallest = largest_smallest(inv_cov)
        condition_above = 1e5 if fixed_condition else condition_above
        judged = smallest if smallest_judged else largest
        small = judged <= eigenvalue_below if eigenvalue_at_threshold else judged < eigenvalue_below
        condition = largest / smallest
        thin = condition >= condition_above if condition_at_threshold else condition > condition_above
        return small | thin | (torch.zeros_like(small) if singular_kept else smallest <= 0)
    return degenerate


def unrounded_omega(n, dim):  # 10000^(-i/dim) for i = 0, 1, ... instead of 10000^(-2i/dim)
    angle = torch.arange(-(n - 1), n, dtype=torch.float32)[:, None] * 10000 ** (-torch.arange(dim // 2) / dim)
    return torch.cat([angle.sin(), angle.cos()], dim=1)


def sinusoids_wrong(interleaved=False, from_zero=False, last_sine_dropped=False):
    def sinusoidal_table(n, dim):
        shift = torch.arange(0 if from_zero else -(n - 1), n if not from_zero else 2 * n - 1, dtype=torch.float32)
        angle = shift[:, None] * 10000 ** (-torch.arange(0, dim, 2, dtype=torch.float32) / dim)
        if interleaved:
            return torch.stack([angle.sin(), angle.cos()], dim=-1).flatten(1)[:, :dim]
        sines = angle.sin()[:, :dim // 2] if last_sine_dropped else angle.sin()
        return torch.cat([sines, angle.cos()], dim=1)[:, :dim]
    return sinusoidal_table


def welch_wrong(pooled_df=False, population_variance=False, one_sided=False, normal_quantile=False):
    def welch_interval(a, b):
        variance = statistics.pvariance if population_variance else statistics.variance
        v_a, v_b = variance(a) / len(a), variance(b) / len(b)
        se = math.sqrt(v_a + v_b)
        df = len(a) + len(b) - 2 if pooled_df else (v_a + v_b) ** 2 / (v_a**2 / (len(a) - 1) + v_b**2 / (len(b) - 1))
        difference = statistics.fmean(a) - statistics.fmean(b)
        half = (1.96 if normal_quantile else stats.t.ppf(0.975, df)) * se
        p = (1 if one_sided else 2) * stats.t.sf(abs(difference) / se, df)
        return dict(difference=difference, low=difference - half, high=difference + half, df=df, p=float(p))
    return welch_interval


def warmup_cosine_wrong(from_zero=False, cosine_over_all=False):
    def warmup_cosine(step, total_steps, warmup=0.05):
        w = max(1, round(warmup * total_steps))
        if step < w:
            return step / w if from_zero else (step + 1) / w
        span = total_steps if cosine_over_all else total_steps - w
        return 0.5 * (1 + math.cos(math.pi * min(1, (step - w) / span)))
    return warmup_cosine


def smallest_eigenvalue_rule(inv_cov, eigenvalue_below=1e-5, condition_above=1e5):
    return degenerate_wrong(smallest_judged=True)(inv_cov, eigenvalue_below, condition_above)


def flops(change):
    """paper_flops of the solutions, then `change(flops, dim, ffn_dim, heads, layers, tokens)`."""
    return lambda s: dict(paper_flops=lambda dim=400, ffn_dim=512, heads=9, layers=6, tokens=256:
                          change(s.paper_flops(dim, ffn_dim, heads, layers, tokens),
                                 dim, ffn_dim, heads, layers, tokens))


def parameters(change):
    """network_parameters of the solutions, then `change(count, encoding, layers, dim)`."""
    return lambda s: dict(network_parameters=lambda e, layers=6, heads=9, dim=400, ffn_dim=512:
                          change(s.network_parameters(e, layers, heads, dim, ffn_dim), e, layers, dim))


def pruned(change):
    """parameters_after_pruning of the solutions with `change(solution, p, before, after, dim, per_head)`."""
    return lambda s: dict(parameters_after_pruning=lambda p, before, after, dim, per_head=3:
                          change(s.parameters_after_pruning, p, before, after, dim, per_head))


# A mistake a student plausibly makes, as the solutions with one function replaced (solutions -> {name: function}),
# and the items (by the start of their names) that must catch it.
MISTAKES = {
    # day 1
    "q - k for k - q": (1, "softmax over keys of quadratic_logits", lambda s: dict(
        quadratic_logits=lambda delta, center, alpha: s.quadratic_logits(-delta, center, alpha))),
    "eq. 9's v^T r_delta without its constant": (1, "quadratic_logits = eq. 9's", lambda s: dict(
        quadratic_logits=lambda delta, center, alpha: s.quadratic_logits(delta, center, alpha)
        + alpha * (center**2).sum())),
    "the kernel flipped (a convolution's, not a cross-correlation's)": (1, "conv_heads W", lambda s: dict(
        conv_heads=lambda weight: s.conv_heads(weight.flip(-2, -1)))),
    "the centers as (col, row)": (1, "conv_heads centers", lambda s: dict(
        conv_heads=lambda weight: (s.conv_heads(weight)[0][:, [1, 0]], s.conv_heads(weight)[1]))),
    "the softmax over the queries": (1, "mhsa_conv at alpha 1", lambda s: dict(
        mhsa_conv=mhsa_conv_wrong(softmax_axis=-2))),
    "no zero tokens around the image": (1, "mhsa_conv at alpha 1", lambda s: dict(
        mhsa_conv=mhsa_conv_wrong(pad=False))),
    "theta for one axis only": (1, "off_center_mass(2)", lambda s: dict(
        off_center_mass=lambda a: 1 - (1 - s.off_center_mass(a)) ** 0.5)),
    "theta over n >= 0 only": (1, "off_center_mass(0.5)", lambda s: dict(  # theta' = (theta + 1) / 2
        off_center_mass=lambda a: 1 - 4 / ((1 - s.off_center_mass(a)) ** -0.5 + 1) ** 2)),
    # day 2
    "H and W swapped in space_to_depth": (2, "space_to_depth = model.space_to_depth on a random [2, 3, 6, 10]",
                                          lambda s: dict(space_to_depth=space_to_depth_hw_swapped)),
    "the colors outer, the block's pixels inner": (2, "space_to_depth = model.space_to_depth on a random [4, 3, 32",
                                                   lambda s: dict(space_to_depth=space_to_depth_colors_outer)),
    "W_out's bias left out": (2, "attention_parameters(400, 9, gaussian)", lambda s: dict(
        attention_parameters=lambda dim, *a, **k: s.attention_parameters(dim, *a, **k) - dim)),
    "the learned tables shared by all layers (section 4.3's text)": (2, "network_parameters(learned) -", parameters(
        lambda n, e, layers, dim: n - (e == "learned") * (layers - 1) * 2 * 31 * dim)),
    "one LayerNorm a block": (2, "network_parameters(quadratic) -", parameters(
        lambda n, e, layers, dim: n - layers * 2 * dim)),
    "multiply-adds, not 2 x": (2, "paper_flops() -", flops(lambda f, *shape: f // 2)),
    "the classifier on every token": (2, "paper_flops() -", flops(
        lambda f, dim, ffn_dim, heads, layers, tokens: f + 2 * (tokens - 1) * dim * 10)),
    "P_h X counted": (2, "paper_flops() -", flops(
        lambda f, dim, ffn_dim, heads, layers, tokens: f + 2 * layers * heads * tokens**2 * dim)),
    "256 tokens whatever the image": (2, "paper_flops(64, 96, 4, 2, tokens=64)", lambda s: dict(
        paper_flops=lambda dim=400, ffn_dim=512, heads=9, layers=6, tokens=256:
        s.paper_flops(dim, ffn_dim, heads, layers))),
    "stretch: the outer product laid out [heads, H, H, W, W]": (2, "stretch: separable_probs = dense", lambda s: dict(
        separable_probs=separable_probs_wrong(layout_ok=False))),
    "stretch: exp / sum without the largest logit subtracted": (2, "stretch: separable_probs = attention.Fast",
                                                                lambda s: dict(separable_probs=separable_probs_wrong(
                                                                    subtract_max=False))),
    # day 3
    "the warm-up a step late": (3, "A.4's schedule", lambda s: dict(
        warmup_cosine=lambda step, *a, **k: s.warmup_cosine(max(step - 1, 0), *a, **k))),
    "the warm-up from 0 at step 0": (3, "A.4's schedule", lambda s: dict(
        warmup_cosine=warmup_cosine_wrong(from_zero=True))),
    "the cosine over every step, warm-up included": (3, "A.4's schedule", lambda s: dict(
        warmup_cosine=warmup_cosine_wrong(cosine_over_all=True))),
    "> for >= in one_pixel_heads": (3, "one_pixel_heads on a hand case", lambda s: dict(
        one_pixel_heads=lambda P, mass=0.5: s.one_pixel_heads(P, math.nextafter(mass, 1)))),
    "the shift as query - key": (3, "one_pixel_heads on a hand case", lambda s: dict(
        one_pixel_heads=lambda P, mass=0.5: {h: (-r, -c) for h, (r, c) in s.one_pixel_heads(P, mass).items()})),
    "centers floored, not rounded": (3, "nearest_pixels", lambda s: dict(
        nearest_pixels=lambda c: [(int(r), int(k)) for r, k in c.floor().tolist()])),
    "a pixel given twice counted twice": (3, "fresh_start_held, 9 heads of std 1.414", lambda s: dict(
        fresh_start_held=lambda pixels, heads, std: sum(s.fresh_start_held([p], heads, std) for p in pixels))),
    "the variance for the standard deviation": (3, "fresh_start_held, 9 heads of std 2", lambda s: dict(
        fresh_start_held=lambda pixels, heads, std: s.fresh_start_held(pixels, heads, std**2))),
    # day 4
    "Sigma^-1 = alpha I": (4, "quadratic_inv_cov(0.5, 2, 1e-6)", lambda s: dict(
        quadratic_inv_cov=lambda a: s.quadratic_inv_cov(a) / 2)),
    "the smallest eigenvalue judged": (4, "degenerate: small, eigenvalues 1e-4 and 5e-6", lambda s: dict(
        degenerate=smallest_eigenvalue_rule)),
    "<= for < on the largest eigenvalue": (4, "degenerate: on the eigenvalue threshold", lambda s: dict(
        degenerate=degenerate_wrong(eigenvalue_at_threshold=True))),
    ">= for > on the condition number": (4, "degenerate: on the condition threshold", lambda s: dict(
        degenerate=degenerate_wrong(condition_at_threshold=True))),
    "the diagonal for the eigenvalues": (4, "degenerate: near singular", lambda s: dict(
        degenerate=degenerate_wrong(diagonal=True))),
    "a singular Sigma^-1 kept when round-off makes its smallest eigenvalue negative": (
        4, "degenerate: singular by round-off", lambda s: dict(degenerate=degenerate_wrong(singular_kept=True))),
    "condition_above ignored": (4, "degenerate: condition 1e4, diag(1, 1e-4): pruned at condition_above=1e3",
                                lambda s: dict(degenerate=degenerate_wrong(fixed_condition=True))),
    "W_out's bias pruned with each head": (4, "parameters_after_pruning(Table 2", pruned(
        lambda right, p, before, after, dim, per_head:
        right(p, before, after, dim, per_head) - dim * (sum(before) - sum(after)))),
    "the positional parameters kept": (4, "parameters_after_pruning(deep6-e6-s0", pruned(
        lambda right, p, before, after, dim, per_head: right(p, before, after, dim, 0))),
    # day 5
    "the frequencies' exponent i / dim": (5, "sinusoidal_table(16, 64) against attention", lambda s: dict(
        sinusoidal_table=unrounded_omega)),
    "sines and cosines interleaved": (5, "sinusoidal_table(16, 64) against attention", lambda s: dict(
        sinusoidal_table=sinusoids_wrong(interleaved=True))),
    "the table's rows from shift 0": (5, "sinusoidal_table(16, 64) against attention", lambda s: dict(
        sinusoidal_table=sinusoids_wrong(from_zero=True))),
    "an odd dim: the last sine dropped": (5, "sinusoidal_table(5, 7)", lambda s: dict(
        sinusoidal_table=sinusoids_wrong(last_sine_dropped=True))),
    "q - k for k - q in relative_logits": (5, "relative_logits against SelfAttention2d(encoding='learned')",
                                           lambda s: dict(relative_logits=lambda v_row, v_col, r_row, r_col, H, W:
                                                          s.relative_logits(v_row, v_col, r_row.flip(0), r_col.flip(0),
                                                                            H, W))),
    "Student's pooled degrees of freedom": (5, "welch_interval(a, b): the Welch-Satterthwaite df", lambda s: dict(
        welch_interval=welch_wrong(pooled_df=True))),
    "variances divided by n": (5, "welch_interval(a, b): difference and interval ends", lambda s: dict(
        welch_interval=welch_wrong(population_variance=True))),
    "a one-sided p-value": (5, "welch_interval(a, b): the two-sided p-value", lambda s: dict(
        welch_interval=welch_wrong(one_sided=True))),
    "1.96 for Student's t quantile": (5, "welch_interval(a, b): difference and interval ends", lambda s: dict(
        welch_interval=welch_wrong(normal_quantile=True))),
}


@pytest.mark.parametrize("mistake", MISTAKES)
def test_each_check_catches_a_plausible_mistake(mistake):
    """The stubs fail every item whatever its tolerance; these wrong solutions show the items are not too loose."""
    day, item_name, replace = MISTAKES[mistake]
    right = solutions(day)
    wrong = types.SimpleNamespace(**(vars(right) | replace(right)))
    named = [item for item in items(day) if item.name.startswith(item_name)]
    assert named, f"no item of day {day} is named {item_name!r}"
    for item in named:
        assert evaluate(item, right)[0] == "PASS" and evaluate(item, wrong)[0] == "FAIL", (mistake, item.name)


def test_day3s_bands_are_those_of_the_committed_runs():
    from exercises.day3_check import BANDS
    runs = sorted(RUN.parent.glob("train-*-s*"))
    if not runs:
        pytest.skip("day 3's committed runs are not in this copy")
    assert sorted(run.name for run in runs) == sorted(f"train-{p}-s{s}" for p in ("bf16", "fp32") for s in range(10))
    ends = [json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])["layers"] for run in runs]
    for (measure, layer), band in BANDS.items():
        values = [end[layer - 1][measure] for end in ends]
        assert band == (min(values), max(values)), (measure, layer, values)


# The files a run folder holds, named bare in the handouts ("its steps.jsonl").
RUN_FILES = {"config.json", "steps.jsonl", "heads.jsonl", "metrics.jsonl", "train.log", "checkpoint.pt",
             "measures.json", "prune.log", "bench.json", "bench.txt"}
PATHLIKE = re.compile(r"[A-Za-z0-9_.*{},/-]+")


def named_paths(text: str) -> set:
    """The repository paths a Markdown page names: in inline code, code blocks and link targets."""
    spans = re.findall(r"```.*?```|`[^`\n]+`", text, flags=re.S) + re.findall(r"\]\(([^)#\s]+)", text)
    found = set()
    for span in spans:
        for token in PATHLIKE.findall(span):
            token = token.strip(".,")
            top = token.split("/")[0]
            if "/" in token and top in {"lab", "exercises"} or re.fullmatch(r"[\w-]+\.(py|md|sh)", token):
                found.add(token)
    found |= {module.replace(".", "/") + ".py" for module in re.findall(r"python3? -m ([\w.]+)", text)
              if module.split(".")[0] in {"lab", "exercises"}}  # `python -m lab.compare`: lab/compare.py
    return found


def expand(pattern: str) -> list:
    """`a{0,1}b*` -> the patterns to glob: braces expanded."""
    match = re.search(r"\{([^{}]*)\}", pattern)
    if not match:
        return [pattern]
    return [p for part in match.group(1).split(",")
            for p in expand(pattern[:match.start()] + part + pattern[match.end():])]


def test_handouts_name_only_files_the_copy_holds():
    """Every path in exercises/*.md (and the answers, where they ship) exists; exercises/solutions/ may be absent."""
    pages = sorted(HERE.glob("*.md")) + sorted(HERE.glob("solutions/*.md"))
    has_solutions = (HERE / "solutions").is_dir()
    missing = []
    for page in pages:
        for path in named_paths(page.read_text()):
            if path in RUN_FILES or path.startswith("exercises/solutions") and not has_solutions:
                continue
            if re.search(r"\{[^{},]*\}", path):  # a Python f-string's {name}: a template, not a path
                continue
            places = [ROOT, HERE, page.parent] if "/" not in path else [ROOT, page.parent]
            if not any(glob.glob(str(place / p)) for place in places for p in expand(path.replace("dayN", "day?"))):
                missing.append(f"{page.relative_to(ROOT)}: {path}")
    assert not missing, missing


def test_the_students_copy_leaves_the_solutions_out(tmp_path):
    from exercises.students_copy import copy_tree
    dest = tmp_path / "course"
    copy_tree(ROOT, dest)
    assert not (dest / "exercises/solutions").exists() and not (dest / ".git").exists()
    assert all((dest / "exercises" / f"{name}.py").exists() for name in DAYS.values())
    assert (dest / "exercises/check.py").exists() and (dest / RUN.relative_to(ROOT) / "checkpoint.pt").exists() \
        == (RUN / "checkpoint.pt").exists()
