"""The week's checks, checked: every item of every day fails on the untouched stubs and passes on
the reference solutions. `python -m pytest -q exercises` (or `python -m pytest -q`, every suite)."""
import importlib
import json
import types
from pathlib import Path

import pytest
import torch

from exercises.check import DAYS, check

# Day 3's run items read a training run: the committed fp32 run of day 3's command, seed 0.
RUN = Path(__file__).parent.parent / "lab/results/course/train-fp32-s0"


def run_for(day: int) -> str:
    if day != 3:
        return ""
    if not (RUN / "checkpoint.pt").exists():
        pytest.skip(f"{RUN} is not in this copy")
    return str(RUN)


@pytest.mark.parametrize("day", sorted(DAYS))
def test_every_item_fails_on_the_stubs(day):
    results = check(day, run=run_for(day))
    assert results and not [line for ok, line in results if ok]


@pytest.mark.parametrize("day", sorted(DAYS))
def test_every_item_passes_on_the_solutions(day):
    results = check(day, solutions=True, run=run_for(day))
    assert results and all(ok for ok, _ in results), "\n".join(line for ok, line in results if not ok)


def smallest_eigenvalue_rule(inv_cov, eigenvalue_below=1e-5, condition_above=1e5):
    smallest, largest = torch.linalg.eigvalsh(inv_cov.double()).unbind(-1)
    return (smallest < eigenvalue_below) | (largest / smallest > condition_above)


def unrounded_omega(n, dim):  # 10000^(-i/dim) for i = 0, 1, ... instead of 10000^(-2i/dim)
    angle = torch.arange(-(n - 1), n, dtype=torch.float32)[:, None] * 10000 ** (-torch.arange(dim // 2) / dim)
    return torch.cat([angle.sin(), angle.cos()], dim=1)


# A mistake a student plausibly makes, as the solutions with one function replaced, and the item that must catch it.
MISTAKES = {
    "q - k for k - q": (1, "softmax over keys of quadratic_logits",
                        lambda s: dict(quadratic_logits=lambda delta, center, alpha: s.quadratic_logits(-delta, center, alpha))),
    "the kernel flipped (a convolution's, not a cross-correlation's)": (1, "conv_heads W",
                        lambda s: dict(conv_heads=lambda weight: s.conv_heads(weight.flip(-2, -1)))),
    "W_out's bias left out": (2, "attention_parameters(400, 9, gaussian)",
                        lambda s: dict(attention_parameters=lambda dim, *a, **k: s.attention_parameters(dim, *a, **k) - dim)),
    "multiply-adds, not 2 x": (2, "paper_flops() -", lambda s: dict(paper_flops=lambda *a, **k: s.paper_flops(*a, **k) // 2)),
    "the warm-up a step late": (3, "A.4's schedule",
                        lambda s: dict(warmup_cosine=lambda step, *a, **k: s.warmup_cosine(max(step - 1, 0), *a, **k))),
    "centers floored, not rounded": (3, "nearest_pixels",
                        lambda s: dict(nearest_pixels=lambda c: [(int(r), int(k)) for r, k in c.floor().tolist()])),
    "Sigma^-1 = alpha I": (4, "quadratic_inv_cov(0.5, 2, 1e-6)", lambda s: dict(quadratic_inv_cov=lambda a: s.quadratic_inv_cov(a) / 2)),
    "the smallest eigenvalue judged": (4, "degenerate: small, eigenvalues 1e-4 and 5e-6",
                        lambda s: dict(degenerate=smallest_eigenvalue_rule)),
    "the frequencies' exponent i / dim": (5, "sinusoidal_table(16, 64) against attention",
                        lambda s: dict(sinusoidal_table=unrounded_omega)),
}


@pytest.mark.parametrize("mistake", MISTAKES)
def test_each_check_catches_a_plausible_mistake(mistake):
    """The stubs fail every item whatever its tolerance; these wrong solutions show the items are not too loose."""
    day, item_name, replace = MISTAKES[mistake]
    solutions = importlib.import_module("exercises.solutions." + DAYS[day])
    wrong = types.SimpleNamespace(**(vars(solutions) | replace(solutions)))
    items = [item for item in importlib.import_module(f"exercises.day{day}_check").items(run_for(day))
             if item.name.startswith(item_name)]
    assert items, f"no item of day {day} is named {item_name!r}"
    for item in items:  # a value that fails, not an exception
        assert item.passes(float(item.measure(solutions))) and not item.passes(float(item.measure(wrong))), mistake


def test_day3s_bands_are_those_of_the_committed_runs():
    from exercises.day3_check import BANDS
    runs = sorted(RUN.parent.glob("train-*-s*"))
    if not runs:
        pytest.skip("day 3's committed runs are not in this copy")
    assert sorted(run.name for run in runs) == [f"train-{p}-s{s}" for p in ("bf16", "fp32") for s in range(5)]
    ends = [json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])["layers"] for run in runs]
    for (measure, layer), band in BANDS.items():
        values = [end[layer - 1][measure] for end in ends]
        assert band == (min(values), max(values)), (measure, layer, values)
