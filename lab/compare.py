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
import dataclasses
import json
import math
import statistics
import sys
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import matplotlib
import numpy as np
import torch
from scipy import stats

matplotlib.use("Agg")
import matplotlib.pyplot as plt

import data as data_lib
import measures
import visualize
from attention import SelfAttention2d
from measures import layer_measures
from model import model_from_config
from records import head_snapshot
from runtime import option, parse_flags
from train import Config as TrainConfig
from train import applies, warmup_cosine

NOT_THE_EXPERIMENT = {"seed", "out", "resume", "device", "data_dir", "compile", "environment", "earlier_parts", "log_every"}
LAYER_MEASURES = ("locality_3x3", "locality_5x5", "one_pixel_heads", "one_pixel", "ring", "sides", "inside_3x3",
                  "inside_5x5", "mass_3x3", "mass_5x5", "distance", "coverage", "overlap")
MEASURES = LAYER_MEASURES + ("travel_mean", "travelled") + tuple(f"start_{k}" for k in LAYER_MEASURES)
ORIGINS = {"travel_mean": "travel: net distance from the start, mean over all heads, px",
           "travel_one_pixel": "travel of the one-pixel heads, px",
           "path": "path: distances from logged step to step, summed; mean over all heads, px",
           "alpha": "median alpha", "wide": f"heads with alpha below {measures.WIDE}",
           "sharp": f"heads with alpha at least {measures.SHARP}",
           "one_pixel": "distinct pixels of one-pixel heads",
           "already_nearest": "of those, a head's nearest pixel at its own start",
           "already_nearest_other": "chance: the same against another seed's start",
           "already_nearest_fresh": "chance: the same against a fresh start (exact mean)",
           "own_start": "one-pixel heads on their own start's nearest pixel",
           "own_start_chance": "chance: the start's pixels dealt to the heads at random",
           "shared": "pixels held by 2+ one-pixel heads", "shared_start_gap": "start distance of heads sharing one, px"}
ORIGIN_STYLES = {"travel_one_pixel": "--", "already_nearest": "--",  # beside the solid line of its panel
                 "already_nearest_other": ":", "already_nearest_fresh": ":", "own_start_chance": ":"}  # chance: dotted
CURVES = {"one_pixel_heads": "one-pixel heads", "one_pixel": "distinct pixels of one-pixel heads",
          "sides": "sides of the query holding one", "inside_3x3": "those pixels in the 3x3 window",
          "inside_5x5": "those pixels in the 5x5 window", "mass_3x3": "probability in the 3x3 window",
          "mass_5x5": "probability in the 5x5 window", "distance": "centers' distance from the query, px"}


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


def load_run(path) -> dict:
    path = Path(path)
    if not (path / "config.json").exists() or not (path / "metrics.jsonl").exists():
        raise FileNotFoundError(f"{path} is not a run directory (no config.json and metrics.jsonl)")
    metrics = [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]
    if not metrics:
        raise ValueError(f"{path} has not finished an epoch")
    steps = path / "steps.jsonl"
    steps = [json.loads(line) for line in steps.read_text().splitlines()] if steps.exists() else []
    run = dict(path=path, config=json.loads((path / "config.json").read_text()), metrics=metrics,
               steps={line["step"]: line["layers"] for line in steps},  # step -> each layer's measures
               heads={line["step"]: line.get("heads") for line in steps},  # step -> each layer's heads (or None)
               losses={line["step"]: line["train_loss"] for line in steps})  # step -> the epoch's mean loss so far
    add_start(run)
    return run


def with_defaults(config: dict) -> dict:
    """A run's config with the default of every setting it does not record (recorded before
    the option existed)."""
    defaults = {f.name: f.default for f in dataclasses.fields(TrainConfig) if f.default is not dataclasses.MISSING}
    return defaults | config


def add_start(run: dict):
    """Into the final epoch's measures of each layer: the same measures at the run's start
    (`start_` + name), from its model rebuilt as train.py initialized it (its seed), when that
    model's heads match the run's heads.jsonl epoch 0 (else the start is not known); and, for
    heads with centers, the travel from the first to the last snapshot (measures.travel)."""
    path, final = run["path"] / "heads.jsonl", run["metrics"][-1].get("layers")
    if not path.exists() or not final:
        return
    snapshots = [json.loads(line) for line in path.read_text().splitlines()]
    torch.manual_seed(run["config"]["seed"])  # as train.py seeds before building the model
    model = model_from_config(with_defaults(run["config"]))
    rebuilt = json.loads(json.dumps(head_snapshot(model)))
    if snapshots[0]["epoch"] == 0 and same_heads(rebuilt, snapshots[0]["layers"]):
        for found, start in zip(final, layer_measures(model)):
            if found is not None:
                found.update({f"start_{k}": v for k, v in start.items()})
    if "centers" in snapshots[0]["layers"][0] and snapshots[-1]["epoch"] == run["metrics"][-1]["epoch"]:
        for found, moved in zip(final, measures.layer_travel(model, snapshots, with_defaults(run["config"])["center_std"])):
            if found is not None and moved is not None:
                found.update(travel_mean=moved["travel_mean"], travelled=moved["travelled"])


def same_heads(a: list, b: list) -> bool:
    """Two heads.jsonl layer lists equal to the 4 decimals the central maps are stored with."""
    return len(a) == len(b) and all(x.keys() == y.keys() and all(
        np.allclose(np.array(x[k]), np.array(y[k]), atol=2e-4, rtol=0) for k in x) for x, y in zip(a, b))


def group(runs: list) -> dict:
    """Runs by experiment: the config without the seed (and settings that compute alike). A
    setting that a run's config lacks takes its default (with_defaults); one that means
    nothing to the run's model (recorded before such settings were refused) is left out."""
    groups = {}
    for run in runs:
        config = with_defaults(run["config"])
        key = json.dumps({k: v for k, v in config.items() if k not in NOT_THE_EXPERIMENT
                          and applies(k, config["encoding"])}, sort_keys=True)
        groups.setdefault(key, []).append(run)
    for key, members in groups.items():
        seeds = [r["config"]["seed"] for r in members]
        if len(set(seeds)) < len(seeds):
            raise ValueError(f"runs {', '.join(str(r['path']) for r in members)} repeat a seed of one experiment")
    return groups


def spread(values: list) -> dict:
    """Mean, sample standard deviation (n - 1; 0 for one value), min and max."""
    return dict(mean=statistics.fmean(values), std=statistics.stdev(values) if len(values) > 1 else 0.0,
                min=min(values), max=max(values))


def summarize(members: list) -> dict:
    """One experiment: seeds, final test accuracy, per-layer measures and wall time, each spread over seeds."""
    finals = [r["metrics"][-1] for r in members]
    if len({m["epoch"] for m in finals}) > 1:
        stops = ", ".join(f"{r['path']} ({m['epoch']})" for r, m in zip(members, finals))
        raise ValueError(f"runs of one experiment stopped at different epochs: {stops}")
    layers = [m.get("layers") for m in finals]
    per_layer = []
    if all(layers):
        for i in range(len(layers[0])):
            found = [l[i] for l in layers]
            per_layer.append(None if None in found else
                             {k: spread([f[k] for f in found]) for k in MEASURES if k in found[0]})
    return dict(seeds=sorted(r["config"]["seed"] for r in members), epochs=finals[0]["epoch"],
                test_acc=spread([m["test_acc"] for m in finals]), minutes=spread([m["seconds"] / 60 for m in finals]),
                layers=per_layer, data=data_name(members[0]["config"]))


def data_name(config: dict) -> str:
    return (config.get("data") or {}).get("name", "not recorded")


def values(members: list, name: str, layer: int, step: int = None) -> list:
    """Each run's final test accuracy (`test_acc`), or its measure `name` of `layer` (1-based)
    at the final epoch, or at `step` (steps.jsonl)."""
    finals = [r["metrics"][-1] for r in members]
    if name == "test_acc":
        return [m["test_acc"] for m in finals]
    if step is None:
        found = [(m.get("layers") or [None] * layer)[layer - 1] for m in finals]
    else:
        missing = [str(r["path"]) for r in members if step not in r["steps"]]
        if missing:
            raise ValueError(f"{', '.join(missing)} logged no step {step} (train.py --log-every)")
        found = [r["steps"][step][layer - 1] for r in members]
    if any(f is None or name not in f for f in found):
        raise ValueError(f"not every run has {name} for layer {layer}")
    return [f[name] for f in found]


def end_of(members: list) -> str:
    """"end", or where a run still training stopped: "epoch 2 of 6"."""
    stopped, epochs = members[0]["metrics"][-1]["epoch"], members[0]["config"].get("epochs", 0)
    return f"epoch {stopped} of {epochs}" if stopped < epochs else "end"


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


def run_origins(run: dict, layer: int) -> dict:
    """{step: measures.origins of `layer` (1-based) at that step against step 0, with `path`,
    the heads' mean path (measures.path_length) over the logged steps up to it} of a run whose
    steps.jsonl holds the layer's heads with centers; computed once a run and layer, kept in the
    run for the table, the pooled line and the figure that read it."""
    if not has_layer(run, layer):
        raise ValueError(f"{run['path']} logged no heads with centers for layer {layer} at step 0 (train.py --log-every)")
    found = run.setdefault("origins", {})  # layer -> its steps' origins
    if layer not in found:
        shape = model_from_config(with_defaults(run["config"])).attention_layers[layer - 1]  # positions: centers, alpha
        steps, logged = zip(*((step, heads[layer - 1]) for step, heads in sorted(run["heads"].items())))
        paths = np.cumsum([0.0] + [statistics.fmean(measures.path_length(pair)) for pair in zip(logged, logged[1:])])
        found[layer] = {step: measures.origins(shape, logged[0], now) | {"path": float(path)}
                        for step, now, path in zip(steps, logged, paths)}
    return {step: dict(at) for step, at in found[layer].items()}  # the caller's to add to


def group_origins(members: list, layer: int) -> list:
    """run_origins of each run of an experiment, with `already_nearest_other`: the chance level
    of `already_nearest`, the run's one-pixel pixels held by another seed's start, averaged over
    the other seeds (every ordered pair; None for an experiment of one seed)."""
    found = [run_origins(r, layer) for r in members]
    starts = [measures.nearest_pixels(r["heads"][0][layer - 1]) for r in members]
    for i, steps in enumerate(found):
        others = [s for j, s in enumerate(starts) if j != i]
        std = with_defaults(members[i]["config"])["center_std"]
        for at in steps.values():
            at["already_nearest_other"] = statistics.fmean(measures.held(at["pixels"], s) for s in others) \
                if others else None
            at["already_nearest_fresh"] = measures.fresh_start_held(at["pixels"], len(starts[i]), std)
    return found


def pooled_held(members: list, layer: int, step: int) -> str:
    """One line: the one-pixel pixels the seeds' own starts held, summed over the seeds, against a
    fresh start's exact mean and the chance that fresh starts hold at least as many."""
    found = [f[step] for f in group_origins(members, layer)]
    held, fresh = sum(a["already_nearest"] for a in found), sum(a["already_nearest_fresh"] for a in found)
    std, heads = with_defaults(members[0]["config"])["center_std"], len(members[0]["heads"][0][layer - 1]["centers"])
    tail = measures.fresh_start_tail([a["pixels"] for a in found], heads, std, held)
    return (f"layer {layer}, step {step:,}, {len(found)} seeds: their own starts held {held} of their "
            f"{sum(a['one_pixel'] for a in found)} one-pixel pixels; a fresh start, {fresh:.1f} on average, "
            f"at least {held} with probability {tail:.3f}")


def has_layer(run: dict, layer: int) -> bool:
    """Whether the run logged `layer`'s heads with centers at step 0."""
    heads = run["heads"].get(0) or []
    return layer <= len(heads) and heads[layer - 1] is not None


def origins_table(groups: dict, steps: list, layers: list) -> str:
    """Markdown: a row an experiment, layer and step; ORIGINS there (and the start's nearest
    pixels), each a count per seed: mean (min-max) over the seeds where it is defined (the
    start gap: seeds with a shared pixel; "-": none), never a sum over seeds."""
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


def steps_per_epoch(config: dict) -> int:
    """Training steps an epoch (data.Batches drops the ragged end)."""
    config = with_defaults(config)
    return (config["subset"] or data_lib.TRAIN_IMAGES[config["dataset"]]) // config["batch_size"]


def position_lr_sum(config: dict, steps: list) -> list:
    """The centers' learning rate summed over the steps before each of `steps` (lr times
    --position-lr times the warm-up and cosine factor): how far a run's schedule let its
    centers move, to set runs with another --position-lr, --lr or length side by side."""
    config = with_defaults(config)
    factor = warmup_cosine(config["epochs"] * steps_per_epoch(config), config["warmup"])
    rate = np.cumsum([0.0] + [config["lr"] * config["position_lr"] * factor(t) for t in range(max(steps))])
    return [float(rate[s]) for s in steps]


def origins_figure(groups: dict, layers: list, out: Path, x: str = "step") -> Path:
    """What training did against what the start placed, per layer, against steps (or, x =
    "position_lr", the centers' summed learning rate): travel (dashed: the one-pixel heads'),
    path, median alpha, the one-pixel heads' distinct pixels beside those that were already a
    head's nearest pixel at the start (dashed) and the same against another seed's start
    (dotted: chance), and the heads on their own start's pixel beside its chance (dotted); each
    experiment's mean over seeds with the min-max band."""
    panels = (("travel_mean", "travel_one_pixel"), ("path",), ("alpha",),
              ("one_pixel", "already_nearest", "already_nearest_other"), ("own_start", "own_start_chance"))
    titles = ("travel from the start, px;\ndashed: the one-pixel heads'", "path, step to step, px", "median alpha (log)",
              "one-pixel heads' distinct pixels; dashed: of those,\na head's nearest at the start; dotted: another seed's",
              "one-pixel heads on their own start's pixel;\ndotted: the start's pixels dealt at random")
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.6))
    fig.suptitle("the heads against their start (central query); per seed, mean over seeds, min-max band", fontsize=9, y=1.08)
    for key, label in labels(groups).items():
        for layer in (l for l in layers if has_layer(groups[key][0], l)):
            found = group_origins(groups[key], layer)
            steps = sorted(set.intersection(*(set(f) for f in found)))
            where = steps if x == "step" else position_lr_sum(groups[key][0]["config"], steps)
            color = None
            for ax, names in zip(axes, panels):
                for name in names:
                    style = ORIGIN_STYLES.get(name, "-")
                    columns = [[math.nan if f[s][name] is None else f[s][name] for f in found] for s in steps]
                    line, = ax.plot(where, [statistics.fmean(c) for c in columns], style, lw=1.2, color=color,
                                    label=f"{label}, layer {layer} ({len(found)} seeds)" if style == "-" else None)
                    color = line.get_color()
                    ax.fill_between(where, [min(c) for c in columns], [max(c) for c in columns], color=color, alpha=0.15)
    for ax, title in zip(axes, titles):
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("step" if x == "step" else "centers' learning rate summed over the steps")
        ax.grid(alpha=0.3)
    axes[2].set_yscale("log")
    axes[0].legend(fontsize=6)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"origins_layers{'-'.join(map(str, layers))}{'' if x == 'step' else '_' + x}.png"
    fig.savefig(path, dpi=130, bbox_inches="tight")
    plt.close(fig)
    return path


def difference(a: list, b: list) -> dict:
    """mean(a) - mean(b), its 95% interval and the two-sided p-value of Welch's t-test."""
    result = stats.ttest_ind(a, b, equal_var=False)
    interval = result.confidence_interval(0.95)
    return dict(difference=statistics.fmean(a) - statistics.fmean(b), low=float(interval.low),
                high=float(interval.high), p=float(result.pvalue), n=(len(a), len(b)))


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


def labels(groups: dict) -> dict:
    """A name for each experiment: its settings that another experiment with the same setting
    sets otherwise (a ResNet's width is not compared with an attention network's nothing)."""
    configs = {key: json.loads(key) for key in groups}
    shown = lambda k, v: f"data={data_name({'data': v})}" if k == "data" else f"{k}={v}"

    def name(c):
        differ = [k for k in sorted(c) if any(k in o and o[k] != c[k] for o in configs.values())]
        return " ".join(shown(k, c[k]) for k in differ) or c["encoding"]

    return {key: name(c) for key, c in configs.items()}


def cell(s: dict, digits: int) -> str:
    if s["min"] == s["max"]:
        return f"{s['mean']:.{digits}f}"
    return f"{s['mean']:.{digits}f} ({s['min']:.{digits}f}-{s['max']:.{digits}f})"


def start_end(m: dict, name: str, digits: int) -> str:
    """"start → end" where the run's start is known (compare.add_start), else the end alone."""
    return (f"{cell(m['start_' + name], digits)} → " if "start_" + name in m else "") + cell(m[name], digits)


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


def band_figure(curves: dict, xlabel: str, ylabel: str, path: Path, style: str = "-") -> Path:
    """Each experiment's curve, {label: (x, columns)} with the seeds' values at each x in a
    column: the mean over seeds, the min-max band shaded."""
    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    for name, (x, columns) in curves.items():
        line, = ax.plot(x, [statistics.fmean(c) for c in columns], style, ms=3, label=f"{name} ({len(columns[0])} seeds)")
        ax.fill_between(x, [min(c) for c in columns], [max(c) for c in columns], color=line.get_color(), alpha=0.2)
    ax.set_xlabel(xlabel), ax.set_ylabel(ylabel)
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=150, bbox_inches="tight")
    plt.close(fig)
    return path


def curves_figure(groups: dict, out: Path) -> Path:
    """Test accuracy per epoch, over the epochs every seed of the experiment finished."""
    curves = {}
    for key, name in labels(groups).items():
        columns = list(zip(*([m["test_acc"] for m in r["metrics"]] for r in groups[key])))
        curves[name] = (range(1, len(columns) + 1), columns)
    return band_figure(curves, "epoch", "test accuracy", out / "accuracy_over_seeds.png", "-o")


def interval_losses(run: dict) -> dict:
    """{logged step: the training loss averaged over the steps since the previous logged step}.
    steps.jsonl holds the epoch's running mean m at step s, over the n(s) steps of that epoch so
    far; over (p, s] within one epoch the mean is (m(s) n(s) - m(p) n(p)) / (n(s) - n(p)), and
    from an epoch's start it is m(s) itself. A climb that the running mean would smooth shows."""
    per_epoch, losses = steps_per_epoch(run["config"]), run["losses"]
    found, previous = {}, None  # previous: (epoch, n, m) at the last logged step
    for s in sorted(s for s, loss in losses.items() if loss is not None):
        epoch, n = (s - 1) // per_epoch, (s - 1) % per_epoch + 1  # step 1 is epoch 0's first
        if previous and previous[0] == epoch:
            _, n_p, m_p = previous
            found[s] = (losses[s] * n - m_p * n_p) / (n - n_p)
        else:
            found[s] = losses[s]
        previous = epoch, n, losses[s]
    return found


def loss_figure(groups: dict, out: Path) -> Path:
    """The training loss between logged steps (interval_losses), at the steps every seed logged."""
    curves = {}
    for key, name in labels(groups).items():
        per_run = [interval_losses(r) for r in groups[key]]
        steps = sorted(set.intersection(*(set(f) for f in per_run)))
        if not steps:
            raise ValueError(f"{name}: no training loss in steps.jsonl (train.py --log-every)")
        curves[name] = (steps, [[f[s] for f in per_run] for s in steps])
    return band_figure(curves, "step", "training loss between logged steps", out / "training_loss.png")


def steps_figure(groups: dict, layer: int, out: Path) -> Path:
    """Fig. 2 by training: `layer`'s CURVES measures against steps (steps.jsonl), each
    experiment's mean over its seeds, with the min-max band; a run stopped early (to be
    resumed) counts up to its last step, and the legend says how far it got."""
    names = {key: label for key, label in labels(groups).items() if all(r["steps"] for r in groups[key])}
    if not names:
        raise ValueError("no run has steps.jsonl (train.py --log-every)")
    fig, axes = plt.subplots(2, 4, figsize=(14, 5.8), sharex=True)
    fig.suptitle("central query; mean over seeds, min-max band; step 0 is the start", fontsize=9)
    for key, label in names.items():
        members = groups[key]
        steps = sorted(set.union(*(set(r["steps"]) for r in members)))
        ends = sorted({max(r["steps"]) for r in members})
        short = f"; the shortest to step {ends[0]:,}" if len(ends) > 1 else ""
        for ax, name in zip(axes.flat, CURVES):
            columns = [[r["steps"][s][layer - 1].get(name, math.nan) for r in members if s in r["steps"]] for s in steps]
            line, = ax.plot(steps, [statistics.fmean(c) for c in columns], lw=1.2,
                            label=f"{label} ({len(members)} seeds{short})")
            ax.fill_between(steps, [min(c) for c in columns], [max(c) for c in columns], color=line.get_color(), alpha=0.2)
    for ax, name in zip(axes.flat, CURVES):
        ax.set_title(f"layer {layer}: {CURVES[name]}", fontsize=9)
        ax.grid(alpha=0.3)
    for ax in axes[1]:
        ax.set_xlabel("step")
    axes[0, 0].legend(fontsize=6)
    out.mkdir(parents=True, exist_ok=True)
    fig.savefig(out / f"steps_layer{layer}.png", dpi=130, bbox_inches="tight")
    plt.close(fig)
    return out / f"steps_layer{layer}.png"


def last_heads(run: dict, layer: int):
    """The layer's entry of the run's last heads.jsonl snapshot, or None."""
    path = run["path"] / "heads.jsonl"
    if not path.exists():
        return None
    layers = json.loads(path.read_text().splitlines()[-1])["layers"]
    return layers[layer - 1] if layer <= len(layers) else None


def maps_figure(runs: list, layer: int, out: Path) -> Path:
    """Fig. 5's style for every run recording central-query probabilities (learned, sinusoidal,
    mlp): a row a run, a column a head, the layer's map at the end of training."""
    runs = [r for r in runs if "central" in (last_heads(r, layer) or {})]
    if not runs:
        raise ValueError("no run has central-query probabilities in heads.jsonl (learned, sinusoidal, mlp)")
    maps = [np.array(last_heads(r, layer)["central"]) for r in runs]  # [heads, H, W] each
    heads = max(len(m) for m in maps)
    fig, axes = plt.subplots(len(runs), heads, figsize=(1.0 * heads + 1.6, 1.05 * len(runs)), squeeze=False)
    for ax in axes.flat:
        ax.axis("off")
    for i, (run, m) in enumerate(zip(runs, maps)):
        H, W = m.shape[1:]
        for h in range(len(m)):
            image = axes[i, h].imshow(m[h], cmap="viridis", norm=matplotlib.colors.PowerNorm(0.5, 0, 1))  # faint mass shows
            axes[i, h].add_patch(plt.Rectangle((W // 2 - 0.5, H // 2 - 0.5), 1, 1, fill=False, ec="white", lw=0.8))
        axes[i, 0].text(-0.1, 0.5, run["path"].name, fontsize=7, va="center", ha="right", transform=axes[i, 0].transAxes)
    bar = fig.colorbar(image, ax=axes, fraction=0.02, pad=0.02)
    bar.set_label(f"layer {layer}: probability (central query: box)", fontsize=7)
    out.mkdir(parents=True, exist_ok=True)
    fig.savefig(out / f"fig5_side_by_side_layer{layer}.png", dpi=130, bbox_inches="tight")
    plt.close(fig)
    return out / f"fig5_side_by_side_layer{layer}.png"


def grids_figure(runs: list, layer: int, out: Path, zoom: int = 4) -> Path:
    """Fig. 2 of every run with head centers (heads.jsonl), side by side: the layer's centers
    from initialization (x) over training, and the final 50% / 90% regions, within `zoom` pixels."""
    runs = [r for r in runs if "centers" in (last_heads(r, layer) or {})]
    if not runs:
        raise ValueError("no run has head centers in heads.jsonl (quadratic or gaussian heads)")
    fig, axes = plt.subplots(1, len(runs), figsize=(3.2 * len(runs), 3.4), squeeze=False)
    for run, ax in zip(runs, axes[0]):
        snapshots = [json.loads(line)["layers"][layer - 1] for line in (run["path"] / "heads.jsonl").read_text().splitlines()]
        heads = len(snapshots[0]["centers"])
        grid = (run["config"].get("image_size", 32) // 2,) * 2
        shape = SelfAttention2d(1, heads, grid, run["config"]["encoding"])  # positions only: dim does not matter
        visualize.draw_trajectories(ax, shape, snapshots, list(range(heads)), f"{run['path'].name}, layer {layer}")
        ax.get_legend().remove()
        ax.set_xlim(-zoom - 0.5, zoom + 0.5), ax.set_ylim(zoom + 0.5, -zoom - 0.5)
    out.mkdir(parents=True, exist_ok=True)
    fig.savefig(out / f"fig2_side_by_side_layer{layer}.png", dpi=130, bbox_inches="tight")
    plt.close(fig)
    return out / f"fig2_side_by_side_layer{layer}.png"


def main():
    cfg = Config(**parse_flags(Config, __doc__, positional=("runs",)))
    try:
        groups = group([load_run(path) for path in cfg.runs])
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
        if cfg.out:
            print(f"wrote {curves_figure(groups, Path(cfg.out))}")
            if cfg.origins:
                print(f"wrote {origins_figure(groups, cfg.origins, Path(cfg.out), cfg.origins_x)}")
            runs, out = [r for g in groups.values() for r in g], Path(cfg.out)
            for figure in (partial(loss_figure, groups, out), partial(steps_figure, groups, cfg.layer, out),
                           partial(grids_figure, runs, cfg.layer, out), partial(maps_figure, runs, cfg.layer, out)):
                try:
                    print(f"wrote {figure()}")
                except ValueError as e:
                    print(f"no {figure.func.__name__}: {e}")
    except (FileNotFoundError, ValueError) as e:
        sys.exit(f"error: {e}")


if __name__ == "__main__":
    main()
