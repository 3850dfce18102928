"""lab/compare.py's figures (--out): accuracy and loss over the seeds, the layers' measures against
steps, the heads against their start, and each run's Figs. 2 and 5 side by side.

Each experiment is drawn as its mean over seeds with the min-max band shaded.
"""
import json
import math
import statistics
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import numpy as np

import visualize
from attention import SelfAttention2d
from lab.experiments import CURVES, group_origins, has_layer, interval_losses, labels, last_heads, position_lr_sum


ORIGIN_STYLES = {"travel_one_pixel": "--", "already_nearest": "--",  # beside the solid line of its panel
                 "already_nearest_other": ":", "own_start_chance": ":"}  # chance: dotted


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
    """Test accuracy per epoch, over the epochs every seed of the experiment finished and tested
    (a run with --eval-every tests some epochs only)."""
    curves = {}
    for key, name in labels(groups).items():
        columns = [(epoch, column) for epoch, column in enumerate(
            zip(*([m["test_acc"] for m in r["metrics"]] for r in groups[key])), start=1) if None not in column]
        curves[name] = ([epoch for epoch, _ in columns], [column for _, column in columns])
    return band_figure(curves, "epoch", "test accuracy", out / "accuracy_over_seeds.png", "-o")


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
        shape = SelfAttention2d(1, heads, (16, 16), run["config"]["encoding"])  # a CIFAR-10 run's grid; positions only
        visualize.draw_trajectories(ax, shape, snapshots, list(range(heads)), f"{run['path'].name}, layer {layer}")
        ax.get_legend().remove()
        ax.set_xlim(-zoom - 0.5, zoom + 0.5), ax.set_ylim(zoom + 0.5, -zoom - 0.5)
    out.mkdir(parents=True, exist_ok=True)
    fig.savefig(out / f"fig2_side_by_side_layer{layer}.png", dpi=130, bbox_inches="tight")
    plt.close(fig)
    return out / f"fig2_side_by_side_layer{layer}.png"
