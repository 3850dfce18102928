"""Runs that differ only in their seed are one experiment: mean and spread over the seeds.

    python compare.py results/grid/*                # a Markdown table, a row an experiment
    python compare.py results/grid/* --out figures  # and the test accuracy curves, min-max band,
                                                    # and each run's Fig. 2 side by side (--layer)

A run is a directory holding train.py's config.json and metrics.jsonl. Runs are grouped by
every setting of their config except the seed and what does not change the computation
(run directory, resume, device, data folder, torch.compile, environment record). For each
group: the seeds, the final epoch's test accuracy (mean, standard deviation over seeds,
min-max), each measure of each attention layer at the final epoch (prove.measures, logged
by train.py every epoch: mean and min-max) and the wall time.
"""
import dataclasses
import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt

import visualize
from attention import SelfAttention2d
from flags import option, parse_flags
from model import model_from_config
from train import Config as TrainConfig

NOT_THE_EXPERIMENT = {"seed", "out", "resume", "device", "data_dir", "compile", "environment"}
MEASURES = ("locality_3x3", "locality_5x5", "one_pixel", "ring", "sides", "coverage")


@dataclass
class Config:
    runs: list = option([], "run directories (config.json and metrics.jsonl)", nargs="+")
    out: str = option("", "folder for the figures (none without it)")
    layer: int = option(1, "the layer that the side-by-side Figs. 2 and 5 show")


def load_run(path) -> dict:
    path = Path(path)
    if not (path / "config.json").exists() or not (path / "metrics.jsonl").exists():
        raise FileNotFoundError(f"{path} is not a run directory (no config.json and metrics.jsonl)")
    metrics = [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]
    if not metrics:
        raise ValueError(f"{path} has not finished an epoch")
    return dict(path=path, config=json.loads((path / "config.json").read_text()), metrics=metrics)


def group(runs: list) -> dict:
    """Runs by experiment: the config without the seed (and settings that compute alike). A
    setting that a run's config lacks (recorded before the option existed) takes its default."""
    defaults = {f.name: f.default for f in dataclasses.fields(TrainConfig) if f.default is not dataclasses.MISSING}
    groups = {}
    for run in runs:
        config = defaults | run["config"]
        key = json.dumps({k: v for k, v in config.items() if k not in NOT_THE_EXPERIMENT}, sort_keys=True)
        groups.setdefault(key, []).append(run)
    for key, members in groups.items():
        seeds = [r["config"]["seed"] for r in members]
        if len(set(seeds)) < len(seeds):
            raise ValueError(f"runs {', '.join(str(r['path']) for r in members)} repeat a seed of one experiment")
    return groups


def spread(values: list) -> dict:
    """Mean, sample standard deviation (0 for one value), min and max."""
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
                layers=per_layer)


def labels(groups: dict) -> dict:
    """A name for each experiment: the settings in which it differs from the others."""
    configs = {key: json.loads(key) for key in groups}
    names = set().union(*configs.values())
    differ = sorted(k for k in names if len({json.dumps(c.get(k)) for c in configs.values()}) > 1)
    return {key: " ".join(f"{k}={c.get(k)}" for k in differ) or c["encoding"] for key, c in configs.items()}


def cell(s: dict, digits: int) -> str:
    if s["min"] == s["max"]:
        return f"{s['mean']:.{digits}f}"
    return f"{s['mean']:.{digits}f} ({s['min']:.{digits}f}-{s['max']:.{digits}f})"


def table(groups: dict) -> str:
    """Markdown: an experiment a row; test accuracy mean ± std (min-max); each layer's measures mean (min-max)."""
    summaries = {key: summarize(members) for key, members in groups.items()}
    n_layers = max((len(s["layers"]) for s in summaries.values()), default=0)
    head = ["experiment", "parameters", "seeds", "epochs", "minutes", "test acc, mean ± std (min-max)"]
    for i in range(1, n_layers + 1):
        head += [f"L{i} locality 3x3 / 5x5", f"L{i} one-pixel heads / ring / sides", f"L{i} coverage"]
    rows = [head, ["---"] * len(head)]
    for key, name in labels(groups).items():
        s = summaries[key]
        acc = s["test_acc"]
        parameters = sum(p.numel() for p in model_from_config(json.loads(key)).parameters())
        row = [name, f"{parameters:,}", ",".join(map(str, s["seeds"])), str(s["epochs"]), cell(s["minutes"], 1),
               f"{acc['mean']:.3f} ± {acc['std']:.3f} ({acc['min']:.3f}-{acc['max']:.3f})"]
        for i in range(n_layers):
            m = s["layers"][i] if i < len(s["layers"]) else None
            if not m:
                row += ["-"] * 3
                continue
            row += [" / ".join(cell(m[k], 3) for k in ("locality_3x3", "locality_5x5")), " / ".join(cell(m[k], 1) for k in ("one_pixel", "ring", "sides")),
                    cell(m["coverage"], 1) if "coverage" in m else "-"]
        rows.append(row)
    return "\n".join("| " + " | ".join(r) + " |" for r in rows)


def curves_figure(groups: dict, out: Path) -> Path:
    """Test accuracy per epoch: each experiment's mean over seeds, its min-max band shaded."""
    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    for key, name in labels(groups).items():
        per_run = [[m["test_acc"] for m in r["metrics"]] for r in groups[key]]
        epochs = range(1, min(map(len, per_run)) + 1)
        columns = list(zip(*per_run))
        mean = [statistics.fmean(c) for c in columns]
        line, = ax.plot(epochs, mean, "-o", ms=3, label=f"{name} ({len(per_run)} seeds)")
        ax.fill_between(epochs, [min(c) for c in columns], [max(c) for c in columns], color=line.get_color(), alpha=0.2)
    ax.set_xlabel("epoch"), ax.set_ylabel("test accuracy")
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6)
    out.mkdir(parents=True, exist_ok=True)
    fig.savefig(out / "accuracy_over_seeds.png", dpi=150, bbox_inches="tight")
    plt.close(fig)
    return out / "accuracy_over_seeds.png"


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
        if cfg.out:
            print(f"wrote {curves_figure(groups, Path(cfg.out))}")
            runs = [r for g in groups.values() for r in g]
            for figure in (grids_figure, maps_figure):
                try:
                    print(f"wrote {figure(runs, cfg.layer, Path(cfg.out))}")
                except ValueError as e:
                    print(f"no {figure.__name__}: {e}")
    except (FileNotFoundError, ValueError) as e:
        sys.exit(f"error: {e}")


if __name__ == "__main__":
    main()
