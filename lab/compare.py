"""Runs that differ only in their seed are one experiment: mean and spread over the seeds,
and between experiments, the difference with its 95% interval.

    python -m lab.compare lab/results/grid/*           # a Markdown table, a row an experiment,
                                                       # then every pair of experiments' difference
    python -m lab.compare A/* B/* --measures one_pixel # also the difference of layer 1's one_pixel
    python -m lab.compare lab/results/grid/* --out runs/compare
                                                       # and the test accuracy curves, min-max band,
                                                       # and each run's Fig. 2 side by side (--layer)
    python -m lab.compare lab/results/fig2/deep6-lr02-e30-s* --at 0 3000 15000 --origins 1 4
                                                       # layers 1 and 4 against their start: travel,
                                                       # alpha, pixels the start already held, chance

A pattern in quotes, "lab/results/grid/laptop-s*", is expanded here: PowerShell and cmd pass it
on as typed, and a pattern that matches no run is an error.

A run is a directory holding train.py's config.json and metrics.jsonl. Runs are grouped by
every setting of their config except the seed and what does not change the computation
(run directory, resume, device, data folder, torch.compile, environment record); the data's
name and checksum are a setting, so runs on different data are never one group. For each
group: the data, the seeds, the final epoch's test accuracy (mean, sample standard deviation
(n - 1) over seeds, min-max), each measure of each attention layer at the final epoch
(measures.py, logged by train.py every epoch, with travel from heads.jsonl: mean and min-max)
and the wall time. For two groups: the difference of their means with a 95% interval and
the p-value of Welch's t-test (scipy.stats), which does not assume equal variances.
"""
import glob
import json
import statistics
from dataclasses import dataclass
from functools import partial

import matplotlib
from scipy import stats

import measures
from lab import plots
from lab.experiments import (CURVES, LAYER_MEASURES, MEASURES, check_layers, difference, end_of, group, group_origins,
                             has_layer, labels, load_run, spread, summarize, values, with_defaults)
from model import model_from_config
from runtime import command_line, option, output_folder, parse_flags


ORIGINS = {"travel_mean": "travel: net distance from the start, mean over all heads, px",
           "travel_one_pixel": "travel of the one-pixel heads, px",
           "path": "path: distances from logged step to step, summed; mean over all heads, px",
           "alpha": "median alpha", "wide": f"heads with alpha below {measures.WIDE}",
           "sharp": f"heads with alpha at least {measures.SHARP}",
           "sharp_began_nearest": "of those k, among the k heads that began nearest the query",
           "sharp_began_nearest_chance": "chance: k heads drawn at random (k^2 / heads)",
           "one_pixel": "distinct pixels of one-pixel heads",
           "already_nearest": "of those, a head's nearest pixel at its own start",
           "already_nearest_other": "chance: the same against another seed's start",
           "already_nearest_chance": "chance: the same against a fresh start (exact mean)",
           "own_start": "one-pixel heads on their own start's nearest pixel",
           "own_start_chance": "chance: the start's pixels dealt to the heads at random",
           "shared": "pixels held by 2+ one-pixel heads", "shared_start_gap": "start distance of heads sharing one, px"}


@dataclass
class Config:
    runs: list = option([], "run directories (config.json and metrics.jsonl)", nargs="+")
    out: str = option("", "folder for the figures (none without it)")
    layer: int = option(1, "the layer that the side-by-side Figs. 2 and 5 show, and whose --measures are compared")
    measures: list = option([], f"measures of --layer to compare between experiments too, and each against "
                                f"its value at the start: {', '.join(MEASURES)}", nargs="*", choices=MEASURES)
    at: list = option([], "steps at which to tabulate --layer's measures from steps.jsonl (train.py --log-every)",
                      nargs="*", type=int)
    origins: list = option([], "layers whose heads to follow from the start (measures.origins): a table at the "
                               "--at steps, and with --out a figure against steps", nargs="*", type=int)
    origins_x: str = option("step", "the origins figure's x-axis: steps, or the centers' learning rate summed over "
                                    "them (runs with another --position-lr side by side)",
                            choices=["step", "position_lr"])


def run_paths(arguments: list) -> list:
    """The run directories the arguments name. A glob pattern (`*`, `?`, `[`) is expanded here, in
    sorted order: PowerShell and cmd pass it on as typed. A pattern that matches nothing is an error."""
    paths = []
    for argument in arguments:
        if not set("*?[") & set(argument):
            paths.append(argument)
            continue
        found = sorted(glob.glob(argument))
        if not found:
            raise ValueError(f"no run matches {argument!r}")
        paths += found
    return paths


def table(groups: dict) -> str:
    """Markdown: an experiment a row; test accuracy mean ± sample std (min-max); each layer's
    measures mean (min-max)."""
    summaries = {key: summarize(members) for key, members in groups.items()}
    n_layers = max((len(s["layers"]) for s in summaries.values()), default=0)
    head = ["experiment", "data", "parameters", "seeds", "epochs", "minutes",
            "test acc, mean ± sample std (n-1) (min-max)"]
    for i in range(1, n_layers + 1):
        head += [f"L{i} locality 3x3, epoch 0 → end", f"L{i} locality 5x5", f"L{i} one-pixel pixels, epoch 0 → end",
                 f"L{i} ring / sides / in 5x5", f"L{i} coverage", f"L{i} travel mean px / one-pixel heads moved >= 1 px"]
    rows = [head, ["---"] * len(head)]
    for key, name in labels(groups).items():
        s = summaries[key]
        acc = s["test_acc"]
        parameters = sum(p.numel() for p in model_from_config(json.loads(key)).parameters())
        row = [name, s["data"], f"{parameters:,}", ",".join(map(str, s["seeds"])), str(s["epochs"]), cell(s["minutes"], 1),
               f"{acc['mean']:.3f} ± {acc['std']:.3f} ({acc['min']:.3f}-{acc['max']:.3f})"]
        for i in range(n_layers):
            m = s["layers"][i] if i < len(s["layers"]) else None
            if not m:
                row += ["-"] * 6
                continue
            row += [start_end(m, "locality_3x3", 3), cell(m["locality_5x5"], 3), start_end(m, "one_pixel", 1),
                    " / ".join(cell(m[k], 1) if k in m else "-" for k in ("ring", "sides", "inside_5x5")),
                    cell(m["coverage"], 1) if "coverage" in m else "-",
                    f"{cell(m['travel_mean'], 2)} / {cell(m['travelled'], 1)}" if "travelled" in m else "-"]
        rows.append(row)
    return "\n".join("| " + " | ".join(r) + " |" for r in rows)


def cell(s: dict, digits: int) -> str:
    if s["min"] == s["max"]:
        return f"{s['mean']:.{digits}f}"
    return f"{s['mean']:.{digits}f} ({s['min']:.{digits}f}-{s['max']:.{digits}f})"


def start_end(m: dict, name: str, digits: int) -> str:
    """"start → end" where the run's start is known (experiments.add_start), else the end alone."""
    return (f"{cell(m['start_' + name], digits)} → " if "start_" + name in m else "") + cell(m[name], digits)


def differences(groups: dict, names: list, layer: int) -> str:
    """Every pair of experiments: the difference of each quantity in `names` with its 95%
    interval and Welch's p-value (a group of one seed has no spread: no interval), at their
    final epochs; a run still training is compared at steps (--at), not here."""
    lines = []
    keys = list(labels(groups).items())
    for i, (key_a, name_a) in enumerate(keys):
        for key_b, name_b in keys[i + 1:]:
            lines.append(f"{name_a}  minus  {name_b}:")
            unfinished = [f"{n} stopped at {end_of(g)}" for n, g in ((name_a, groups[key_a]), (name_b, groups[key_b]))
                          if end_of(g) != "end"]
            if unfinished:  # a run still training: its last epoch is not the experiment's end (--at: equal steps)
                lines.append(f"  not compared: {'; '.join(unfinished)}; --at compares steps")
                continue
            for name in names:
                what = name if name == "test_acc" else f"layer {layer} {name}"
                try:
                    a, b = values(groups[key_a], name, layer), values(groups[key_b], name, layer)
                except ValueError as e:
                    lines.append(f"  {what}: {e}")
                    continue
                if min(len(a), len(b)) < 2:
                    lines.append(f"  {what}: {statistics.fmean(a) - statistics.fmean(b):+.3f} (one seed: no interval)")
                    continue
                d = difference(a, b)
                signed = lambda x: f"{round(x, 3) + 0.0:+.3f}"  # + 0.0: no "-0.000"
                lines.append(f"  {what}: {signed(d['difference'])}, 95% interval [{signed(d['low'])}, {signed(d['high'])}], "
                             f"Welch p = {d['p']:.3g} ({d['n'][0]} and {d['n'][1]} seeds)")
    return "\n".join(lines)


def changes(groups: dict, names: list, layer: int, step: int = None) -> str:
    """For each experiment, each measure's change from the run's start to its end (or to
    `step`): the mean change with its 95% interval (Student's t over the seeds' changes), then
    each seed's start → end (change). The start is step 0 of steps.jsonl when `step` is given, else the start that
    add_start rebuilt."""
    lines = []
    for key, label in labels(groups).items():
        for name in names:
            try:
                start = values(groups[key], name, layer, 0) if step is not None else \
                    values(groups[key], "start_" + name, layer)
                end = values(groups[key], name, layer, step)
            except ValueError as e:
                lines.append(f"{label}: layer {layer} {name}: {e}")
                continue
            d = [b - a for a, b in zip(start, end)]
            text = (f"{label}: layer {layer} {name}, start → {f'step {step}' if step is not None else end_of(groups[key])}: "
                    f"{statistics.fmean(start):.3f} → {statistics.fmean(end):.3f}, change {statistics.fmean(d):+.3f}")
            if len(d) > 1 and statistics.stdev(d) > 0:
                interval = stats.ttest_1samp(d, 0).confidence_interval(0.95)
                text += f", 95% interval [{interval.low:+.3f}, {interval.high:+.3f}]"
            seeds = ", ".join(f"{a:.3f} → {b:.3f} ({b - a:+.3f})" for a, b in zip(start, end))
            lines.append(text + f" ({len(d)} seeds: {seeds})")
    return "\n".join(lines)


def steps_table(groups: dict, steps: list, layer: int) -> str:
    """Markdown: a row an experiment and step, `layer`'s CURVES measures there (steps.jsonl),
    mean (min-max) over the seeds."""
    rows = [["experiment", "seeds", "step"] + list(CURVES)]
    rows.append(["---"] * len(rows[0]))
    for key, label in labels(groups).items():
        for step in steps:
            try:
                found = {name: spread(values(groups[key], name, layer, step)) for name in CURVES}
            except ValueError:
                continue
            rows.append([label, str(len(groups[key])), f"{step:,}"] + [cell(found[n], 2) for n in CURVES])
    return "\n".join("| " + " | ".join(r) + " |" for r in rows)


def origins_table(groups: dict, steps: list, layers: list) -> str:
    """Markdown: a row an experiment, layer and step; ORIGINS there (and the start's nearest
    pixels), each a count per seed: mean (min-max) over the seeds where it is defined (the
    start gap: seeds with a shared pixel; "-": none), never a sum over seeds. Below the table, at the last
    step, a line an experiment and layer pools its seeds against fresh starts (pooled_held)."""
    rows = [["experiment", "seeds", "layer", "step", "start's nearest pixels"] + list(ORIGINS.values())]
    rows.append(["---"] * len(rows[0]))
    for key, label in labels(groups).items():
        for layer in (l for l in layers if has_layer(groups[key][0], l)):  # a deeper layer: deeper models only
            found = group_origins(groups[key], layer)
            for step in (s for s in steps if all(s in f for f in found)):
                at = [f[step] for f in found]
                known = {name: [a[name] for a in at if a[name] is not None] for name in ["start_pixels"] + list(ORIGINS)}
                rows.append([label, str(len(at)), str(layer), f"{step:,}"] +
                            [cell(spread(v), 2) if v else "-" for v in known.values()])
    last = max(steps)  # and below the table, each experiment's count there summed over its seeds
    pooled = [pooled_held(members, layer, last) for members in groups.values() for layer in layers
              if last and has_layer(members[0], layer) and all(last in r["heads"] for r in members)]
    return "\n".join(["| " + " | ".join(r) + " |" for r in rows] + pooled)


def pooled_held(members: list, layer: int, step: int) -> str:
    """One line: the one-pixel pixels the seeds' own starts held, summed over the seeds, against a
    fresh start's exact mean and the chance that fresh starts hold at least as many."""
    found = [f[step] for f in group_origins(members, layer)]
    held, fresh = sum(a["already_nearest"] for a in found), sum(a["already_nearest_chance"] for a in found)
    std, heads = with_defaults(members[0]["config"])["center_std"], len(members[0]["heads"][0][layer - 1]["centers"])
    tail = measures.fresh_start_tail([a["pixels"] for a in found], heads, std, held)
    return (f"layer {layer}, step {step:,}, {len(found)} seeds: their own starts held {held} of their "
            f"{sum(a['one_pixel'] for a in found)} one-pixel pixels; a fresh start, {fresh:.1f} on average, "
            f"at least {held} with probability {tail:.3f}")


def main():
    matplotlib.use("Agg")  # figures to files only
    cfg = Config(**parse_flags(Config, __doc__, positional=("runs",)))
    groups = group([load_run(path) for path in run_paths(cfg.runs)])
    check_layers([r for g in groups.values() for r in g], cfg.layer, cfg.origins)
    out = output_folder(cfg.out, "") if cfg.out else None  # never a run's folder
    print(table(groups))
    if len(groups) > 1:
        print("\nDifferences between experiments (final epoch):")
        print(differences(groups, ["test_acc"] + cfg.measures, cfg.layer))
    if cfg.measures:
        print("\nEach experiment's change from its start (final epoch):")
        print(changes(groups, [m for m in cfg.measures if m in LAYER_MEASURES], cfg.layer))
    if cfg.at:
        print(f"\nLayer {cfg.layer} at steps {', '.join(map(str, cfg.at))} (steps.jsonl):")
        print(steps_table(groups, cfg.at, cfg.layer))
        for step in (s for s in cfg.at if s and cfg.measures):
            print(changes(groups, [m for m in cfg.measures if m in LAYER_MEASURES], cfg.layer, step))
    if cfg.origins:
        print(f"\nLayers {', '.join(map(str, cfg.origins))} against the start (measures.origins; steps.jsonl):")
        print(origins_table(groups, cfg.at or [0], cfg.origins))
    if out:
        print(f"wrote {plots.curves_figure(groups, out)}")
        if cfg.origins:
            print(f"wrote {plots.origins_figure(groups, cfg.origins, out, cfg.origins_x)}")
        runs = [r for g in groups.values() for r in g]
        for figure in (partial(plots.loss_figure, groups, out),
                       partial(plots.steps_figure, groups, cfg.layer, out),
                       partial(plots.grids_figure, runs, cfg.layer, out),
                       partial(plots.maps_figure, runs, cfg.layer, out)):
            try:
                print(f"wrote {figure()}")
            except ValueError as e:
                print(f"no {figure.func.__name__}: {e}")


if __name__ == "__main__":
    command_line(main, (FileNotFoundError, ValueError))
