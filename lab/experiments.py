"""Runs grouped into experiments, for lab/compare.py's tables and lab/plots.py's figures.

A run is a directory holding train.py's config.json and metrics.jsonl (and, with --log-every,
steps.jsonl; heads.jsonl every epoch). load_run reads one; group puts runs that differ only in
their seed (and in what does not change the computation) into one experiment; values, run_origins
and group_origins read a layer's measures at the final epoch or at a logged step, and what its
heads did against their start (measures.origins) beside chance.
"""
import dataclasses
import json
import statistics
from pathlib import Path

import numpy as np
import torch
from scipy import stats

import data as data_lib
import measures
from measures import layer_measures
from model import model_from_config
from records import head_snapshot
from train import Config as TrainConfig
from train import applies, warmup_cosine


NOT_THE_EXPERIMENT = {"seed", "out", "resume", "device", "data_dir", "compile", "environment", "earlier_parts", "log_every",
                      "eval_every"}

LAYER_MEASURES = ("locality_3x3", "locality_5x5", "one_pixel_heads", "one_pixel", "ring", "sides", "inside_3x3",
                  "inside_5x5", "mass_3x3", "mass_5x5", "distance", "coverage", "overlap")

MEASURES = LAYER_MEASURES + ("travel_mean", "travelled") + tuple(f"start_{k}" for k in LAYER_MEASURES)

CURVES = {"one_pixel_heads": "one-pixel heads", "one_pixel": "distinct pixels of one-pixel heads",
          "sides": "sides of the query holding one", "inside_3x3": "those pixels in the 3x3 window",
          "inside_5x5": "those pixels in the 5x5 window", "mass_3x3": "probability in the 3x3 window",
          "mass_5x5": "probability in the 5x5 window", "distance": "centers' distance from the query, px"}


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
    heads with centers, the travel from the first to the last snapshot (measures.origins)."""
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


def labels(groups: dict) -> dict:
    """A name for each experiment: its settings that another experiment with the same setting
    sets otherwise (a ResNet's width is not compared with an attention network's nothing)."""
    configs = {key: json.loads(key) for key in groups}
    shown = lambda k, v: f"data={data_name({'data': v})}" if k == "data" else f"{k}={v}"

    def name(c):
        differ = [k for k in sorted(c) if any(k in o and o[k] != c[k] for o in configs.values())]
        return " ".join(shown(k, c[k]) for k in differ) or c["encoding"]

    return {key: name(c) for key, c in configs.items()}


def data_name(config: dict) -> str:
    return (config.get("data") or {}).get("name", "not recorded")


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


def check_layers(runs: list, layer: int, origins: list):
    """One clear error for a --layer (1-based) that not every run has, or an --origins layer that no run has
    (origins_table shows each layer for the runs that have it)."""
    depths = [with_defaults(r["config"])["layers"] for r in runs]
    if not 1 <= layer <= min(depths):
        raise ValueError(f"--layer takes layers 1 to {min(depths)} (every run has them), got {layer}")
    wrong = sorted({o for o in origins if not 1 <= o <= max(depths)})
    if wrong:
        raise ValueError(f"--origins takes layers 1 to {max(depths)} (the deepest run's), got {wrong}")


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


def difference(a: list, b: list) -> dict:
    """mean(a) - mean(b), its 95% interval and the two-sided p-value of Welch's t-test.

    a, b: two groups of numbers, one a seed, at least 2 each. Returns Python floats
    {"difference", "low", "high", "p"} and "n" = (len(a), len(b)). For each group, v = s^2 / n,
    with s^2 the sample variance (divided by n - 1). The standard error is se = sqrt(v_a + v_b), and
    Welch-Satterthwaite's degrees of freedom are df = (v_a + v_b)^2 / (v_a^2 / (n_a - 1) + v_b^2 / (n_b - 1)).
    The interval is difference -/+ t se, with t the 0.975 quantile of Student's t with df degrees of
    freedom. The p-value is the probability that such a T has |T| >= |difference| / se. scipy.stats.t
    gives the quantile (`ppf`) and the tail (`sf`). When neither group varies, df is undefined and
    counts as 1 (as in scipy.stats.ttest_ind): the interval is the difference itself."""
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    v_a, v_b = x.var(ddof=1) / x.size, y.var(ddof=1) / y.size  # s^2 / n: each mean's variance
    d = statistics.fmean(a) - statistics.fmean(b)
    se = np.sqrt(v_a + v_b)
    with np.errstate(divide="ignore", invalid="ignore"):  # no spread: se = 0, |d| / se infinite or nan
        df = (v_a + v_b) ** 2 / (v_a**2 / (x.size - 1) + v_b**2 / (y.size - 1))  # Welch-Satterthwaite
        df = 1.0 if np.isnan(df) else df
        half = stats.t.ppf(0.975, df) * se  # the interval's half width
        p = 2 * stats.t.sf(np.abs(d) / se, df)  # two-sided: both tails
    return dict(difference=d, low=float(d - half), high=float(d + half), p=float(p), n=(len(a), len(b)))


def has_layer(run: dict, layer: int) -> bool:
    """Whether the run logged `layer`'s heads with centers at step 0."""
    heads = run["heads"].get(0) or []
    return layer <= len(heads) and heads[layer - 1] is not None


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
            at["already_nearest_chance"] = measures.fresh_start_held(at["pixels"], len(starts[i]), std)
    return found


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


def last_heads(run: dict, layer: int):
    """The layer's entry of the run's last heads.jsonl snapshot, or None."""
    path = run["path"] / "heads.jsonl"
    if not path.exists():
        return None
    layers = json.loads(path.read_text().splitlines()[-1])["layers"]
    return layers[layer - 1] if layer <= len(layers) else None
