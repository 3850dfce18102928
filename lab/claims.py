"""Every claim of README.md and of lab/RESULTS.md's Findings, computed from lab/results.

A line of those files names the claim that binds its words with an HTML comment after them,
`<!-- claim: NAME -->` (invisible once rendered); a comment on a line of its own before a table,
`<!-- claims: NAME -->`, binds every row of the table. Each NAME is a function below: it reads the
committed runs (lab.experiments, the same code lab/compare.py prints with) and returns a Claim:
its numbers as printed, the intervals its verdict words rest on, and its recounts of "every",
"all", "none". lab/test_claims.py recomputes each and compares. TIMES binds each time that
README.md and the handouts print to the committed log that measured it.

    python -m lab.claims            # every claim's numbers and intervals
    python -m lab.claims w256_acc   # one
"""
import functools
import glob
import json
import math
import re
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path

from scipy import stats

import measures
from lab.experiments import difference, values, with_defaults
from model import model_from_config

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "lab" / "results"

# The paper's numbers (Cordonnier et al. 2020): Tables 1-2, A.4, section 4.
PAPER = dict(quadratic=0.938, resnet18=0.938, learned=0.918, gaussian=0.934, pruned=0.934, params="12.1M", flops="6.2B",
             pruned_params="9.7M", pruned_flops="4.9B", width=400, layers=6, steps="150,000", epochs=300, lr=0.1,
             ffn=512, std="1.414", authors_std=2, heads=54, pruned_heads=15)
AIMS = dict(laptop_minutes=10, floor_multiple=1.2)  # DESIGN's aims: the preset's time, the fast layer against its floor


# ---- What a claim returns, and how numbers are printed ------------------------------------------

@dataclass
class Claim:
    numbers: list = field(default_factory=list)  # every number the bound words may print, as printed
    intervals: list = field(default_factory=list)  # (low, high) of each interval the verdict rests on
    universal: bool = None  # the recount behind "every", "all", "none", "never": does it hold?
    required: list = field(default_factory=list)  # numbers the bound words must print
    rows: dict = None  # a table's claim: first cell -> that row's numbers, or its own Claim
    missing: str = ""  # runs not yet committed: the claim is skipped, saying which

    def resolved(self) -> list:
        return [low > 0 or high < 0 for low, high in self.intervals]


def fixed(x: float, digits: int) -> str:
    return f"{round(x, digits) + 0.0:.{digits}f}"  # + 0.0: no "-0.00"


def signed(x: float, digits: int) -> str:
    return f"{round(x, digits) + 0.0:+.{digits}f}"


def span(xs: list, digits: int) -> list:
    """min-max as printed: both ends."""
    return [fixed(min(xs), digits), fixed(max(xs), digits)]


def welch(a: list, b: list, digits: int = 3) -> tuple:
    """Welch's difference mean(a) - mean(b) (lab.experiments.difference): its printed numbers and interval."""
    d = difference(a, b)
    return [signed(d["difference"], digits), signed(d["low"], digits), signed(d["high"], digits),
            f"{d['p']:.1g}", f"{d['p']:.2g}"], (d["low"], d["high"])


def student(changes: list, digits: int = 3) -> tuple:
    """Student's interval of the mean change over seeds (as lab.compare's changes prints it)."""
    interval = stats.ttest_1samp(changes, 0).confidence_interval(0.95)
    return [signed(statistics.fmean(changes), digits), signed(interval.low, digits), signed(interval.high, digits)], \
        (interval.low, interval.high)


# ---- Reading the runs ----------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def run(path: str) -> dict:
    """A committed run as lab.experiments.load_run reads it, without rebuilding its start (not needed here)."""
    folder = RESULTS / path
    read = lambda name: [json.loads(l) for l in (folder / name).read_text().splitlines()] if (folder / name).exists() else []
    steps = read("steps.jsonl")
    return dict(path=folder, config=json.loads((folder / "config.json").read_text()), metrics=read("metrics.jsonl"),
                steps={l["step"]: l["layers"] for l in steps}, heads={l["step"]: l.get("heads") for l in steps},
                losses={l["step"]: l["train_loss"] for l in steps})


def seeds(pattern: str) -> list:
    """The runs of one experiment, seeds in order: `fig2/deep6-e6-s[012]`."""
    found = sorted(p for p in glob.glob(str(RESULTS / pattern)) if Path(p, "config.json").exists())
    return [run(str(Path(p).relative_to(RESULTS))) for p in found]


def last_step(r: dict) -> int:
    return max(r["steps"])


def at(r: dict, layer: int, name: str, step: int = None) -> float:
    return r["steps"][last_step(r) if step is None else step][layer - 1][name]


def drift(r: dict, layer: int = 4, step: int = None) -> float:
    """The change of the layer's mean center distance from the query, step 0 to `step` (the last)."""
    return at(r, layer, "distance", step) - at(r, layer, "distance", 0)


def alphas(r: dict, layer: int, step: int = None) -> list:
    return r["heads"][last_step(r) if step is None else step][layer - 1]["alpha"]


@functools.lru_cache(maxsize=None)
def origins_at(path: str, layer: int, step: int) -> dict:
    """measures.origins of `layer` at `step` against step 0 (as lab.experiments.run_origins, one step only),
    with a fresh start's exact mean of the one-pixel pixels it holds (measures.fresh_start_held)."""
    r = run(path)
    shape = model_from_config(with_defaults(r["config"])).attention_layers[layer - 1]
    found = measures.origins(shape, r["heads"][0][layer - 1], r["heads"][step][layer - 1])
    std = with_defaults(r["config"])["center_std"]
    return found | dict(already_nearest_chance=measures.fresh_start_held(found["pixels"], len(r["heads"][0][layer - 1]["centers"]), std))


def origins(r: dict, layer: int, step: int = None) -> dict:
    return origins_at(str(r["path"].relative_to(RESULTS)), layer, last_step(r) if step is None else step)


def final_acc(runs: list) -> list:
    return values(runs, "test_acc", 1)


def steps_of(r: dict) -> int:
    return last_step(r)


def finished(runs: list, count: int) -> bool:
    return len(runs) == count and all(r["metrics"][-1]["epoch"] == r["config"]["epochs"] for r in runs)


# ---- README: the claims table ---------------------------------------------------------------------

def theorem1() -> Claim:
    """prove.py's error at alpha 40 for the 3x3 conv on a photo (its committed log)."""
    line = next(l for l in (RESULTS / "commands/prove.log").read_text().splitlines() if l.startswith("photo 32x32     3"))
    return Claim(numbers=[line.split()[-2], "40", "0"], required=[line.split()[-2]])


def model_sizes() -> Claim:
    """model.py's counts of Table 1's model and of Table 2's pruned one (its committed log), beside the paper's."""
    log = (RESULTS / "commands/model.log").read_text()
    quadratic = re.search(r"^quadratic\s+([\d,]+)\s+\S+\s+(\S+)", log, re.M)
    pruned = re.search(r"^pruned\S*\s+([\d,]+)\s+\S+\s+(\S+)", log, re.M)
    import model as model_lib  # the pruned model's count, as model.py computes it (its log predates the row)
    net = model_lib.build_model("gaussian", heads=model_lib.PRUNED_HEADS)
    params = model_lib.count_parameters(net)
    flops = model_lib.paper_flops(net) / 1e9
    numbers = [quadratic[1], quadratic[2], PAPER["params"], PAPER["flops"], PAPER["pruned_params"], PAPER["pruned_flops"],
               f"{params:,}", f"{flops:.2f}B"] + ([pruned[1], pruned[2]] if pruned else [])
    return Claim(numbers=numbers, required=[quadratic[1], f"{params:,}"])


def table1(model: str) -> Claim:
    """Table 1's model at the laptop preset, today's code, seeds 0-2: final test accuracy, mean (min-max),
    and its Welch difference from the quadratic encoding's (lab/results/table1)."""
    runs, base = seeds(f"table1/{model}-s[012]"), seeds("table1/quadratic-s[012]")
    if not finished(runs, 3) or not finished(base, 3):
        return Claim(missing=f"lab/results/table1/{model}-s{{0,1,2}} and quadratic-s{{0,1,2}} are not all committed "
                             f"and finished yet")
    acc = final_acc(runs)
    numbers = [fixed(statistics.fmean(acc), 3)] + span(acc, 3) + [str(PAPER.get(model, ""))]
    claim = Claim(numbers=numbers + ["3", "1,500"], required=numbers[:3])
    if model != "quadratic":
        printed, interval = welch(acc, final_acc(base))
        claim.numbers += printed
        claim.intervals.append(interval)
    return claim


for _model in ("quadratic", "learned", "gaussian", "sinusoidal", "mlp", "resnet18"):
    globals()[f"table1_{_model}"] = functools.partial(table1, _model)


def table1_h100() -> Claim:
    """The quadratic encoding under A.4's recipe on an H100, 30 epochs, seeds 0 and 1 (section 3.2)."""
    runs = [run("gpu/width400"), run("gpu-s1/width400")]
    acc = final_acc(runs)
    return Claim(numbers=[fixed(a, 3) for a in acc] + ["30", str(PAPER["quadratic"])], required=[fixed(a, 3) for a in acc])


def pruning() -> Claim:
    """prune.py on deep6-e6-s0 (README's command, its prune.log): heads pruned of all, accuracy before and after."""
    path = RESULTS / "fig2/deep6-e6-s0-epyc-pruned"
    kept = json.loads((path / "kept_heads.json").read_text())["layers"]
    heads = 9 * len(kept)
    pruned = heads - sum(map(len, kept))
    table = re.findall(r"^(deep6-e6-s0|pruned|pruned, fine-tuned 1 epoch)\s+(\d\.\d{4})", (path / "prune.log").read_text(), re.M)
    accs = [a for _, a in table]
    sizes = [int(n.replace(",", "")) for n in re.findall(r"^(?:deep6-e6-s0|pruned)\s+\S+\s+([\d,]+)", (path / "prune.log").read_text(), re.M)]
    share = 100 * (1 - sizes[1] / sizes[0])
    return Claim(numbers=[str(pruned), str(heads), *accs, f"{share:.0f}%", str(PAPER["pruned_heads"]), "1",
                          str(PAPER["pruned"])], required=[str(pruned), str(heads)])


def pruning_rule() -> Claim:
    """A.1's rule as prune.py applies it: a quadratic head's Sigma^-1 is 2 alpha I; pruned below 1e-5."""
    import prune
    assert prune.Config().eigenvalue_below == 1e-5
    return Claim(numbers=["2", "1e-5", "-1"])


def claims_table() -> Claim:
    """README's claims table: each row's claim, by its first cell."""
    both = table1_sinusoidal()
    other = table1_mlp()
    both = Claim(numbers=both.numbers + other.numbers, required=both.required + other.required,
                 intervals=both.intervals + other.intervals, missing=both.missing or other.missing)
    return Claim(rows={"Theorem 1": theorem1(), "Tables 1-2: sizes": model_sizes(),
                       "Table 1: quadratic": table1_quadratic(), "Table 1: learned": table1_learned(),
                       "Table 2: Gaussian": table1_gaussian(), "sinusoidal, `mlp`": both,
                       "Table 1: ResNet18": table1_resnet18(), "quadratic, another scale": table1_h100(),
                       "A.1: pruning": pruning(), "Fig. 2: layer 4": fig2_drift()})


# ---- README: Fig. 2 -----------------------------------------------------------------------------------

FIG2 = {  # README's table: runs, as train.py's configs name their width, steps and precision
    "fig2/deep6-e6-s[012]": "fig2/deep6-e6-s[012]", "fig2/deep6-e6-fp32-s*": "fig2/deep6-e6-fp32-s[012]",
    "fig2/deep6-e6-w128-fp32-s*": "fig2/deep6-e6-w128-fp32-s[012]", "fig2/deep6-e6-w256-s*": "fig2/deep6-e6-w256-s[012]",
    "fig2/deep6-lr02-e30-s*": "fig2/deep6-lr02-e30-s[012]", "gpu*/width64": "gpu*/width64", "gpu*/width400": "gpu*/width400"}


def fig2_row(pattern: str) -> list:
    runs = seeds(pattern)
    drifts = [drift(r) for r in runs]
    sharp = [sum(a >= measures.SHARP for a in alphas(r, 4)) for r in runs]
    acc = final_acc(runs)
    config = runs[0]["config"]
    numbers = [str(config["dim"]), f"{steps_of(runs[0]):,}", str(len(runs)), *map(str, sharp), *span(acc, 3),
               *[fixed(a, 3) for a in acc], *[signed(d, 2) for d in drifts], *[signed(x, 2) for x in (min(drifts), max(drifts))]]
    return numbers


def fig2_table() -> Claim:
    """README's Fig. 2 table: each configuration's width, steps, seeds, layer 4's drift from step 0 to
    the last (steps.jsonl), its heads at alpha >= 1 per seed, and the final test accuracy."""
    return Claim(rows={f"`{name}`" + (" (H100)" if name.startswith("gpu") else ""): fig2_row(pattern)
                       for name, pattern in FIG2.items()})


def trained_from_start(r: dict) -> bool:
    return isinstance(r["config"].get("heads", 9), int)  # a pruned model's fine-tuning records its heads per layer


def six_layer_runs() -> list:
    paths = [Path(p).parent for p in sorted(glob.glob(str(RESULTS / "*/*/steps.jsonl")))
             if json.loads((Path(p).parent / "config.json").read_text()).get("layers") == 6]
    return [r for r in (run(str(p.relative_to(RESULTS))) for p in paths) if trained_from_start(r) and 0 in r["steps"]]


def fig2_drift() -> Claim:
    """Layer 4 moves away from the query in every run of README's table (a recount); per configuration,
    Student's interval over its seeds' drifts: resolved on the CPU (3 seeds), not on the H100 (2)."""
    runs = [r for pattern in FIG2.values() for r in seeds(pattern)]
    cpu = [student([drift(r) for r in seeds(p)], 2) for p in FIG2.values() if not p.startswith("gpu")]
    gpu = [student([drift(r) for r in seeds(p)], 2) for p in FIG2.values() if p.startswith("gpu")]
    one_pixel = max(at(r, 4, "one_pixel_heads") for r in runs)
    claim = Claim(numbers=[str(len(runs)), str(len(cpu)), "3", "2", str(int(one_pixel)), "9", "4"],
                  universal=all(drift(r) > 0 for r in runs))
    claim.cpu_resolved = all(low > 0 for _, (low, _) in cpu)
    claim.gpu_resolved = any(low > 0 for _, (low, _) in gpu)
    for printed, interval in gpu:
        claim.numbers += printed
        claim.intervals.append(interval)
    claim.universal = claim.universal and claim.cpu_resolved
    return claim


def width_cpu() -> Claim:
    """Wider is more accurate on the CPU: width 128 minus 64 in fp32, 256 minus 64 in bf16 (Welch)."""
    w128, interval128 = welch(final_acc(seeds("fig2/deep6-e6-w128-fp32-s[012]")), final_acc(seeds("fig2/deep6-e6-fp32-s[012]")))
    w256, interval256 = welch(final_acc(seeds("fig2/deep6-e6-w256-s[012]")), final_acc(seeds("fig2/deep6-e6-s[012]")))
    return Claim(numbers=w128 + w256 + ["128", "256", "64", "3,000"], intervals=[interval128, interval256])


def width_gpu() -> Claim:
    """Width 400 minus 64 on the H100, 2 seeds each (Welch)."""
    printed, interval = welch(final_acc(seeds("gpu*/width400")), final_acc(seeds("gpu*/width64")))
    return Claim(numbers=printed + ["400", "64", "2"], intervals=[interval])


def w256_alpha() -> Claim:
    """Layer 4's largest alpha at step 3,000, width 256 minus the bf16 width-64 base (Welch)."""
    top = lambda pattern: [max(alphas(r, 4, 3000)) for r in seeds(pattern)]
    printed, interval = welch(top("fig2/deep6-e6-w256-s[012]"), top("fig2/deep6-e6-s[012]"), 2)
    return Claim(numbers=printed + ["256", "64", "4", "3,000"], intervals=[interval])


def sharp_count(pattern: str, step: int = 3000) -> list:
    return [sum(a >= measures.SHARP for a in alphas(r, 4, step)) for r in seeds(pattern)]


def w256_sharp() -> Claim:
    """Layer 4's heads at alpha >= 1 at step 3,000, width 256 minus the bf16 base (Welch)."""
    printed, interval = welch(sharp_count("fig2/deep6-e6-w256-s[012]"), sharp_count("fig2/deep6-e6-s[012]"), 1)
    return Claim(numbers=printed + ["256", "1", "4", "3,000"], intervals=[interval])


def drift_welch(a: str, b: str, step: int = 3000) -> tuple:
    return welch([drift(r, 4, step) for r in seeds(a)], [drift(r, 4, step) for r in seeds(b)], 2)


def width_drift() -> Claim:
    """Layer 4's drift: width 128 minus 64 (fp32), 256 minus 64 (bf16), at step 3,000; 400 minus 64 on the H100."""
    pairs = [("fig2/deep6-e6-w128-fp32-s[012]", "fig2/deep6-e6-fp32-s[012]", 3000),
             ("fig2/deep6-e6-w256-s[012]", "fig2/deep6-e6-s[012]", 3000), ("gpu*/width400", "gpu*/width64", 15000)]
    claim = Claim(numbers=["128", "256", "400", "64", "4", "150,000"])
    for a, b, step in pairs:
        printed, interval = drift_welch(a, b, step)
        claim.numbers += printed
        claim.intervals.append(interval)
    printed, interval = welch(sharp_count("fig2/deep6-e6-w256-s[012]"), sharp_count("fig2/deep6-e6-s[012]"), 1)
    claim.numbers += printed
    claim.intervals.append(interval)
    return claim


def scale() -> Claim:
    """The scales: the paper's, and ours at its longest (the largest epoch count of a committed run)."""
    epochs = max(json.loads(Path(p).read_text()).get("epochs", 0) for p in glob.glob(str(RESULTS / "*/*/config.json")))
    return Claim(numbers=[str(PAPER["epochs"]), str(epochs), str(PAPER["layers"]), str(PAPER["width"]), PAPER["steps"], "9",
                          "12", "10"])  # 9 heads a layer; Linear(12, 400) and Linear(400, 10)


def departures() -> Claim:
    """What README's CPU runs set against A.4 (their config.json): lr, the positional rate, the start, the FFN."""
    cpu = [r for p in FIG2.values() if not p.startswith("gpu") for r in seeds(p)]
    lrs = sorted({r["config"]["lr"] for r in cpu})
    rates = {r["config"]["position_lr"] for r in cpu}
    stds = {r["config"]["center_std"] for r in cpu}
    ffn = {r["config"]["ffn_dim"] / r["config"]["dim"] for r in cpu}
    start = {round(a, 1) for r in cpu for a in alphas(r, 4, 0)}
    assert len(rates) == len(stds) == len(ffn) == len(start) == 1, (rates, stds, ffn, start)
    six = all(r["config"]["layers"] == 6 for p in FIG2.values() for r in seeds(p))
    return Claim(universal=six, numbers=[str(lrs[0]), str(lrs[-1]), str(PAPER["lr"]), f"{rates.pop():.0f}x", f"{stds.pop()}",
                          str(PAPER["authors_std"]), str(PAPER["ffn"]), str(PAPER["width"]), fixed(measures.SHARP, 0),
                          fixed(start.pop(), 1), "6", "0", "128", "4", "30", "64", "1,500", "3"])


def laptop_preset() -> Claim:
    """The laptop preset as README's run recorded it (lab/results/student/epyc-bf16/config.json)."""
    r = run("student/epyc-bf16")
    line = next(l for l in (r["path"] / "train.log").read_text().splitlines() if l.startswith("epoch   3/3"))
    return Claim(numbers=[str(r["config"]["layers"]), str(r["config"]["dim"]), f"{steps_of(r):,}"] + re.findall(r"\d[\d.]*", line))


def reading_lines() -> Claim:
    """The reading path's lines: each file to its first `# ----` line, then prune.py whole (as test_all counts them)."""
    count = sum(len((ROOT / name).read_text().split("\n# ----")[0].splitlines())
                for name in ("attention.py", "prove.py", "model.py", "data.py", "train.py"))
    count += len((ROOT / "prune.py").read_text().splitlines())
    return Claim(numbers=[f"{count:,}"], required=[f"{count:,}"], universal=True)  # "in all": the whole count


# ---- Findings --------------------------------------------------------------------------------------

def not_reproduced() -> Claim:
    """No 6-layer run trained from its start ends with more than 2 one-pixel heads of 9 in layer 4 (a recount)."""
    runs = six_layer_runs()
    most = max(at(r, 4, "one_pixel_heads") for r in runs)
    return Claim(numbers=[str(int(most)), "9", "4"], universal=most <= 2)


LAYER1 = ["fig2/paper-e3-s[012]", "fig2/paper-lr02-e30-s[012]", "fig2/deep6-e3-s[012]", "fig2/deep6-e6-s[012]",
          "fig2/deep6-lr02-e30-s[012]"]  # the paper's loss and start, bf16, runs of section 1


def layer1_pixels() -> Claim:
    """Layer 1's distinct one-pixel pixels at each run's end (min-max over the runs of section 1; 15,000 steps apart),
    and the most of the 3x3 window they hold at any logged step (never 9)."""
    ends = [at(r, 1, "one_pixel") for p in LAYER1 for r in seeds(p)]
    long = [at(r, 1, "one_pixel") for p in LAYER1 if "e30" in p for r in seeds(p)]
    inside = max(s[0]["inside_3x3"] for p in LAYER1 for r in seeds(p) for s in r["steps"].values())
    return Claim(numbers=[*[str(int(x)) for x in (min(ends), max(ends), min(long), max(long))], "15,000", "9", "3x3",
                          str(int(inside))], universal=inside < 9)


def own_start(pattern: str) -> Claim:
    """One-pixel heads of layer 1 on their own start's nearest pixel, minus a random deal of the start's pixels
    (measures.origins, per seed at the run's end): Student's interval over the seeds."""
    found = [origins(r, 1) for r in seeds(pattern)]
    printed, interval = student([f["own_start"] - f["own_start_chance"] for f in found], 1)
    r = seeds(pattern)[0]
    return Claim(numbers=printed + [str(r["config"]["layers"]), f"{steps_of(r):,}", "1"], intervals=[interval])


own_start_2l15k = functools.partial(own_start, "fig2/paper-lr02-e30-s[012]")
own_start_6l3k = functools.partial(own_start, "fig2/deep6-e6-s[012]")
own_start_6l15k = functools.partial(own_start, "fig2/deep6-lr02-e30-s[012]")


def start_pixels() -> Claim:
    """The one-pixel pixels each seed's own start held, against a fresh start's exact mean (per seed)."""
    claim = Claim(numbers=["2", "6", "15,000"])
    for pattern in ("fig2/paper-lr02-e30-s[012]", "fig2/deep6-lr02-e30-s[012]"):
        found = [origins(r, 1) for r in seeds(pattern)]
        claim.numbers += [str(f["already_nearest"]) for f in found] + [fixed(f["already_nearest_chance"], 1) for f in found]
        claim.numbers += [str(f["one_pixel"]) for f in found]
    return claim


def layer1_travel() -> Claim:
    """Layer 1's net travel from its start (mean over heads and seeds) at steps 3,000 and 15,000."""
    travel = lambda pattern, step: statistics.fmean(origins(r, 1, step)["travel_mean"] for r in seeds(pattern))
    two = [travel("fig2/paper-lr02-e30-s[012]", s) for s in (3000, 15000)]
    six = [travel("fig2/deep6-lr02-e30-s[012]", s) for s in (3000, 15000)]
    return Claim(numbers=[fixed(x, 2) for x in two + six] + ["2", "6", "3,000", "15,000", "0.02"])


def layer4_out() -> Claim:
    """Layer 4 moves away from the query in every 6-layer run trained from its start (a recount), and the count."""
    runs = six_layer_runs()
    return Claim(numbers=[str(len(runs)), "4", "6"], universal=all(drift(r) > 0 for r in runs), required=[str(len(runs))])


def layer1_mass(pattern: str, name: str, step: int) -> tuple:
    return student([at(r, 1, name, step) - at(r, 1, name, 0) for r in seeds(pattern)])


def local_lr05() -> Claim:
    """Layer 1's probability in 5x5, step 0 to the end, at lr 0.05: 1,500 and 3,000 steps (Student's)."""
    a, ia = layer1_mass("fig2/deep6-e3-s[012]", "mass_5x5", 1500)
    b, ib = layer1_mass("fig2/deep6-e6-s[012]", "mass_5x5", 3000)
    return Claim(numbers=a + b + ["0.05", "6", "1,500", "3,000"], intervals=[ia, ib])


def local_lr02() -> Claim:
    """The same over 15,000 steps at lr 0.02 (not resolved), and the 3x3 probability's rise in every seed."""
    a, ia = layer1_mass("fig2/deep6-lr02-e30-s[012]", "mass_5x5", 15000)
    rises = [at(r, 1, "mass_3x3") - at(r, 1, "mass_3x3", 0) for r in seeds("fig2/deep6-lr02-e30-s[012]")]
    return Claim(numbers=a + ["0.02", "15,000", "3x3"], intervals=[ia], universal=all(x > 0 for x in rises))


def layer4_one_pixel_15k() -> Claim:
    """Layer 4's one-pixel heads at step 15,000 of the 6-layer lr 0.02 runs, per seed."""
    counts = [int(at(r, 4, "one_pixel_heads")) for r in seeds("fig2/deep6-lr02-e30-s[012]")]
    return Claim(numbers=[*map(str, counts), "15,000", "0.02", "0", "2"], required=list(map(str, counts)))


def ladder(rung: str) -> tuple:
    return drift_welch(f"fig2/deep6-e6-{rung}-s[012]", "fig2/deep6-e6-s[012]")


def position_lr() -> Claim:
    """`--position-lr 1` against the base: layer 4's drift, each, and the difference (Welch)."""
    base = student([drift(r, 4, 3000) for r in seeds("fig2/deep6-e6-s[012]")], 2)[0][0]
    rung = student([drift(r, 4, 3000) for r in seeds("fig2/deep6-e6-poslr1-s[012]")], 2)[0][0]
    printed, interval = ladder("poslr1")
    return Claim(numbers=[base, rung] + printed + ["1"], intervals=[interval])


def center_std() -> Claim:
    """`--center-std 2` against the base: layer 4's drift difference (Welch)."""
    printed, interval = ladder("std2")
    return Claim(numbers=printed + ["2"], intervals=[interval])


def optimizer() -> Claim:
    """The paper's optimizer (lr 0.1, centers at the same rate) against `--position-lr 1`, lr the one difference:
    test accuracy (Welch)."""
    printed, interval = welch(final_acc(seeds("fig2/deep6-e6-poslr1-s[012]")), final_acc(seeds("fig2/deep6-e6-lr01-poslr1-s[012]")))
    return Claim(numbers=printed + ["0.1", "1"], intervals=[interval])


def precision_acc() -> Claim:
    """bf16 minus fp32, test accuracy after 3,000 steps of 6 layers (Welch)."""
    printed, interval = welch(final_acc(seeds("fig2/deep6-e6-s[012]")), final_acc(seeds("fig2/deep6-e6-fp32-s[012]")))
    return Claim(numbers=printed + ["3,000", "6"], intervals=[interval])


def precision_drift() -> Claim:
    """fp32 minus bf16, layer 4's drift by step 3,000 (Welch)."""
    printed, interval = drift_welch("fig2/deep6-e6-fp32-s[012]", "fig2/deep6-e6-s[012]")
    return Claim(numbers=printed + ["4"], intervals=[interval])


def gpu_sharp() -> Claim:
    """The H100 runs' sharp layer-4 heads at step 15,000: how many began among as many nearest the query,
    against chance, per run with sharp heads (measures.origins)."""
    claim = Claim(numbers=["4", "15,000"])
    for r in seeds("gpu*/width*"):
        found = origins(r, 4, 15000)
        if found["sharp"]:
            claim.numbers += [str(found["sharp_began_nearest"]), str(found["sharp"]), fixed(found["sharp_began_nearest_chance"], 2)]
    return claim


def not_run() -> Claim:
    return Claim(numbers=[PAPER["steps"], str(PAPER["width"])])


def cpu_classes() -> Claim:
    """The laptop preset's fp32 runs on three CPU classes: their training losses agree to this many digits
    (the smallest and largest agreement over the logged steps, against laptop-fp32)."""
    ref = run("student/laptop-fp32")["losses"]
    digits = []
    for name in ("student/epyc-fp32", "student/epyc-avx2"):
        other = run(name)["losses"]
        for step, loss in ref.items():
            if loss and other.get(step):
                digits.append(math.floor(-math.log10(max(abs(loss - other[step]) / abs(loss), 1e-16))))
    return Claim(numbers=[str(min(digits)), str(max(digits))], universal=min(digits) >= 6)


def overlap_pixels() -> Claim:
    """Layer 1's distinct one-pixel pixels at step 1,500: overlap minus the paper's loss (Welch)."""
    overlap, paper = seeds("fig2/overlap-e3-s[012]"), seeds("fig2/paper-e3-s[012]")
    a, b = [at(r, 1, "one_pixel", 1500) for r in overlap], [at(r, 1, "one_pixel", 1500) for r in paper]
    printed, interval = welch(a, b, 2)
    return Claim(numbers=printed + [fixed(statistics.fmean(a), 1), fixed(statistics.fmean(b), 1), "1,500"], intervals=[interval])


def overlap_mass() -> Claim:
    """Layer 1's probability in 3x3 at step 1,500: overlap minus the paper's loss, Welch's and paired by seed."""
    overlap, paper = seeds("fig2/overlap-e3-s[012]"), seeds("fig2/paper-e3-s[012]")
    a, b = [at(r, 1, "mass_3x3", 1500) for r in overlap], [at(r, 1, "mass_3x3", 1500) for r in paper]
    printed, interval = welch(a, b)
    paired, paired_interval = student([x - y for x, y in zip(a, b)])
    p = stats.ttest_rel(a, b).pvalue
    return Claim(numbers=printed + paired + [f"{p:.2g}", "1,500", "3x3"], intervals=[interval, paired_interval])


def day3_precision() -> Claim:
    """Day 3's 1,000-step runs, fp32 minus bf16, 10 seeds each (Welch)."""
    printed, interval = welch(final_acc(seeds("course/train-fp32-s[0-9]")), final_acc(seeds("course/train-bf16-s[0-9]")))
    return Claim(numbers=printed + ["1,000", str(len(seeds("course/train-fp32-s[0-9]")))], intervals=[interval])


def laptop_aim() -> Claim:
    """The laptop preset's whole command on each class (its train.log) against the 10-minute aim."""
    times = {name: log_seconds(RESULTS / f"student/{name}/train.log")[0] / 60 for name in
             ("laptop", "laptop-fp32", "epyc-bf16", "epyc-fp32", "epyc-avx2")}
    met = all(t < AIMS["laptop_minutes"] for n, t in times.items() if n != "epyc-avx2") and times["epyc-avx2"] > AIMS["laptop_minutes"]
    return Claim(numbers=[str(AIMS["laptop_minutes"])], universal=met)


def floor_multiple() -> Claim:
    """lab/bench.py's fast layer against its Linear floor on the Xeon with AMX (bench-amx.json)."""
    rows = {r["name"]: r["floor_multiple"] for r in json.loads((RESULTS / "bench-amx.json").read_text())["rows"]
            if r.get("kind") == "layer" and r.get("floor_multiple")}
    near = [rows[n] for n in ("quadratic", "learned", "sinusoidal")]
    far = [rows[n] for n in ("gaussian", "mlp")]
    printed = span(near, 2) + span(far, 2) + [str(AIMS["floor_multiple"])]
    return Claim(numbers=printed + [x + "x" for x in printed],
                 intervals=[(min(near) - AIMS["floor_multiple"], math.inf)])


def gpu_share() -> Claim:
    """The H100's training step of the paper's model in bf16: its share of the measured matrix-product peak
    (lab/results/gpu-s1/bench.json), without and with attention dropout."""
    rows = [r["utilization"] for r in json.loads((RESULTS / "gpu-s1/bench.json").read_text())["rows"]
            if r.get("kind") == "model" and r["name"].startswith("paper model") and r["precision"] == "bfloat16"]
    return Claim(numbers=[f"{100 * min(rows):.0f}", f"{100 * min(rows):.0f}%", f"{100 * max(rows):.0f}%"])


def older_code() -> Claim:
    """Section 7's runs (earlier code): learned and sinusoidal layer 1's 3x3 locality after 1,500 steps,
    and learned minus that code's quadratic preset in test accuracy (Welch)."""
    local = [r["metrics"][-1]["layers"][0]["locality_3x3"] for p in ("reviewer/learned-s[012]", "reviewer/sinusoidal-s[012]")
             for r in seeds(p)]
    printed, interval = welch(final_acc(seeds("reviewer/learned-s[012]")), final_acc(seeds("grid/laptop-s[012]")))
    return Claim(numbers=span(local, 3) + printed + ["1,500", "3x3"], intervals=[interval])


def learned_longer() -> Claim:
    """The learned encoding over 10 epochs: layer 1's 3x3 locality at the end, seeds 0-2 (section 7.3)."""
    found = [r["metrics"][-1]["layers"][0]["locality_3x3"] for r in seeds("longer/learned-e10-s[012]")]
    return Claim(numbers=[fixed(x, 3) for x in found] + [fixed(x, 2) for x in found] + ["10", "3x3"])


# ---- Times: each time README and the handouts print, and the committed log that measured it -------

MACHINES = {"AMD EPYC (AVX512-BF16)": "EPYC with AVX512-BF16", "AMD EPYC (AVX2)": "AVX2",
            "Intel(R) Xeon(R) Processor (AMX)": "AMX", "NVIDIA H100 80GB HBM3": "H100"}


def log_seconds(path: Path) -> tuple:
    """A committed log's wall time and the machine it names: /usr/bin/time's "Elapsed" line or train.py's
    "N s wall", else a run's last metrics.jsonl seconds; the machine from the log's environment line or
    its run's config.json."""
    text = path.read_text() if path.is_file() else ""
    elapsed = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (?:(\d+):)?(\d+):([\d.]+)", text)
    wall = re.search(r"([\d.]+) s wall|wall ([\d.]+) s", text)
    if elapsed:
        seconds = int(elapsed[1] or 0) * 3600 + int(elapsed[2]) * 60 + float(elapsed[3])
    elif wall:
        seconds = float(wall[1] or wall[2])
    else:
        seconds = json.loads((path / "metrics.jsonl").read_text().splitlines()[-1])["seconds"]
    hardware = re.search(r"'hardware': '([^']*)'|^# ([^,]*), 2 cores", text, re.M)
    if hardware:
        machine = hardware[1] or hardware[2]
    else:
        machine = json.loads(((path if path.is_dir() else path.parent) / "config.json").read_text())["environment"]["hardware"]
    return seconds, next((v for k, v in MACHINES.items() if machine.startswith(k.split(" (")[0]) and k in machine), machine)


C, A = "commands/", "commands/avx2/"
TIMES = [  # (file, the words on the line the time follows, the logs whose times add up to it)
    ("README.md", "python prove.py", [C + "prove.log"]),
    ("README.md", "python model.py", [C + "model.log"]),
    ("README.md", "python train.py --preset laptop`", ["student/epyc-bf16/train.log"]),
    ("README.md", "fp32:", ["student/epyc-fp32/train.log"]),
    ("README.md", "python visualize.py", [C + "visualize-laptop.log"]),
    ("README.md", "python prune.py", ["fig2/deep6-e6-s0-epyc-pruned/prune.log"]),
    ("README.md", "python -m pytest", [C + "pytest.log"]),
    ("README.md", "--epochs 30", ["gpu/width400"]),
    ("README.md", "the longest command", ["course/train-fp32-s4/train.log"]),
    ("README.md", "AVX2 only:", ["course/avx2only-fp32-s0/train.log"]),
    ("exercises/README.md", "It took", ["course/avx2only-fp32-s0/train.log"]),
    ("exercises/day1_theorem.md", "python prove.py", [C + "prove.log"]),
    ("exercises/day1_theorem.md", "exercises.check 1", [C + "check-day1.log"]),
    ("exercises/day2_network.md", "python model.py", [C + "model.log"]),
    ("exercises/day2_network.md", "exercises.check 2", [C + "check-day2.log"]),
    ("exercises/day2_network.md", "python attention.py", [C + "attention.log"]),
    ("exercises/day3_training.md", "--out runs/day3", ["course/train-fp32-s4/train.log"]),
    ("exercises/day3_training.md", "visualize.py runs/day3", [C + "visualize-day3.log"]),
    ("exercises/day3_training.md", "exercises.check 3", [C + "check-day3.log"]),
    ("exercises/day3_training.md", "AVX2 only, took", ["course/avx2only-fp32-s0/train.log"]),
    ("exercises/day4_pruning.md", "--no-finetune", [C + "prune-day4.log"]),
    ("exercises/day4_pruning.md", "visualize.py lab/results", [C + "visualize-day4.log"]),
    ("exercises/day4_pruning.md", "exercises.check 4", [C + "check-day4.log"]),
    ("exercises/day5_open.md", "The second command", [C + "compare-day5-longer.log"]),
    ("exercises/day5_open.md", "minutes each on an AVX2", [f"{d}-s{s}" for d in ("reviewer/learned", "reviewer/sinusoidal",
                                                                                "reviewer/mlp", "grid/laptop", "grid/start-a4")
                                                           for s in range(3)]),
    ("exercises/day5_open.md", "python model.py", [C + "model.log"]),
    ("exercises/day5_open.md", "exercises.check 5", [C + "check-day5.log"]),
]


def time_of(logs: list) -> tuple:
    """The logs' summed seconds and the machine they share (None where they differ)."""
    found = [log_seconds(RESULTS / log) for log in logs]
    machines = {m for _, m in found}
    return sum(s for s, _ in found), machines.pop() if len(machines) == 1 else None


def main():
    names = sys.argv[1:] or claim_names()
    for name in names:
        print(name, globals()[name]())


def claim_names() -> list:
    """Every claim: a function of no arguments returning a Claim (the helpers above take arguments)."""
    import inspect
    return [n for n, f in globals().items() if callable(f) and not inspect.isclass(f) and n not in CLAIMS_NOT and
            (isinstance(f, functools.partial) or (f.__module__ == __name__ and not inspect.signature(f).parameters))]


CLAIMS_NOT = {"claim_names", "own_start", "main", "run", "origins_at", "Claim", "seeds", "log_seconds", "time_of", "table1", "fig2_row", "drift_welch", "ladder", "welch", "student",
              "span", "fixed", "signed", "layer1_mass", "sharp_count", "six_layer_runs", "trained_from_start", "at", "drift",
              "alphas", "origins", "final_acc", "steps_of", "finished", "last_step"}

if __name__ == "__main__":
    main()
