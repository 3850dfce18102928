"""The paper's figures from a run directory or checkpoint (Figs. 2-8).

    python visualize.py runs/quadratic-paper [--out DIR] [--pdf] [--layer 4]
    python visualize.py runs/gaussian-paper --compare runs/quadratic-paper runs/resnet18-paper

Writes, for the model in the checkpoint:
- fig3/fig6/fig8 (quadratic 9 heads / gaussian / 16 heads; other encodings: fig3 style):
  every layer's heads as their 50% (solid) and 90% (dotted) probability regions around the
  central query pixel (black), one colour per head, on the pixel grid. The regions come from
  the layer's own probabilities: the smallest set of keys holding that mass.
- fig2: the centers of one layer's heads moving over training (from heads.jsonl).
- fig5: the attention map of every head (columns) at every layer (rows) for the central query.
- fig4 (fig7 for a pruned run): test accuracy per epoch of this run and of any --compare runs.
For content models (eq. 8) the probabilities depend on the image: a test image is used.
"""
import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import torch

import data as data_lib
import train as train_lib
from attention import RowColumn
from model import build_model


@dataclass
class Config:
    run: str = ""  # run directory or checkpoint
    out: str = ""  # default RUN/figures
    layer: int = 0  # the layer of Fig. 2 (1-based; 0: layer 4 as in the paper, or the last)
    compare: list = field(default_factory=list)  # more run directories for Figs. 4/7
    pdf: bool = False
    image_index: int = 0  # test image for content models
    at_init: bool = False  # the run's model as train.py initialized it (same seed), not trained


def mass_levels(p: torch.Tensor, masses=(0.5, 0.9)) -> list:
    """Probability thresholds t_m such that the keys with p >= t_m are the fewest holding mass m."""
    sorted_p = p.flatten().sort(descending=True).values
    cumulative = sorted_p.cumsum(0)
    return [sorted_p[min(int((cumulative < m).sum()), len(sorted_p) - 1)].item() for m in masses]


def layer_inputs(model, image: torch.Tensor) -> list:
    """Each attention layer's input [1, H, W, D] for one normalized image [1, 3, 32, 32]."""
    inputs = []
    hooks = [layer.register_forward_pre_hook(lambda m, args: inputs.append(args[0])) for layer in model.attention_layers]
    with torch.no_grad():
        model(image)
    for h in hooks:
        h.remove()
    return inputs


def central_maps(layer, x=None) -> torch.Tensor:
    """Probabilities of the central query over the keys: [heads, H, W]."""
    H, W = layer.grid
    with torch.no_grad():
        P = layer.attention_probs(x)
    P = P[0] if P.dim() == 4 else P
    return P[:, (H // 2) * W + W // 2].view(-1, H, W)


def fine_density(layer, head: int, steps: int = 8):
    """For encodings of a continuous shift, the head's probability on a grid `steps` times finer,
    on the scale of the pixel probabilities (smooth region boundaries). None for lookup tables."""
    if isinstance(layer.encoding, RowColumn) or layer.content:
        return None
    H, W = layer.grid
    rows = torch.linspace(-(H // 2), H - 1 - H // 2, (H - 1) * steps + 1)
    cols = torch.linspace(-(W // 2), W - 1 - W // 2, (W - 1) * steps + 1)
    fine = torch.stack(torch.meshgrid(rows, cols, indexing="ij"), -1)
    pixels = fine[::steps, ::steps]
    with torch.no_grad():
        normalizer = layer.encoding.logits(pixels)[head].logsumexp((0, 1))
        return rows, cols, (layer.encoding.logits(fine)[head] - normalizer).exp()


def head_colors(n: int):
    """One colour per head: tab10 up to 10 heads, tab20 beyond (16 heads in Fig. 8)."""
    return plt.cm.tab10(np.arange(n)) if n <= 10 else plt.cm.tab20(np.arange(n) % 20)


def draw_regions(ax, layer, maps, title):
    H, W = layer.grid
    colors = head_colors(maps.shape[0])
    rows = torch.arange(H) - H // 2
    cols = torch.arange(W) - W // 2
    for h in range(maps.shape[0]):
        t50, t90 = mass_levels(maps[h])
        fine = fine_density(layer, h)
        r, c, density = fine if fine else (rows, cols, maps[h])
        for level, style in ((t90, ":"), (t50, "-")):
            if density.max() > level > density.min():
                ax.contour(c, r, density, levels=[level], colors=[colors[h]], linestyles=style, linewidths=1.2)
            else:  # the region is one key: mark it
                peak = (density == density.max()).nonzero()[0]
                ax.plot(c[peak[1]], r[peak[0]], "o", color=colors[h], ms=4)
    ax.add_patch(plt.Rectangle((-0.5, -0.5), 1, 1, color="black"))
    ax.set_xticks(cols[::2]), ax.set_yticks(rows[::2])
    ax.set_xticks(cols.float() - 0.5, minor=True), ax.set_yticks(rows.float() - 0.5, minor=True)
    ax.grid(which="minor", color="0.9", lw=0.5)
    ax.set_xlim(cols[0] - 0.5, cols[-1] + 0.5), ax.set_ylim(rows[-1] + 0.5, rows[0] - 0.5)
    ax.set_aspect("equal")
    ax.tick_params(labelsize=6)
    ax.set_title(title, fontsize=8)


def save(fig, out: Path, name: str, pdf: bool) -> list:
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{name}.png"] + ([out / f"{name}.pdf"] if pdf else [])
    for path in paths:
        fig.savefig(path, dpi=130, bbox_inches="tight")
    plt.close(fig)
    return paths


def region_figure(model, inputs, out, pdf, name):
    layers = model.attention_layers
    fig, axes = plt.subplots(1, len(layers), figsize=(2.6 * len(layers), 2.9), squeeze=False)
    for i, (layer, ax) in enumerate(zip(layers, axes[0])):
        draw_regions(ax, layer, central_maps(layer, inputs[i] if layer.content else None), f"layer {i + 1}")
    fig.suptitle("Attention of each head around the central query (solid 50%, dotted 90% of its probability)", fontsize=9)
    return save(fig, out, name, pdf)


def maps_figure(model, inputs, out, pdf):
    layers = model.attention_layers
    heads = max(layer.heads for layer in layers)
    fig, axes = plt.subplots(len(layers), heads, figsize=(1.1 * heads, 1.15 * len(layers)), squeeze=False)
    for i, layer in enumerate(layers):
        maps = central_maps(layer, inputs[i] if layer.content else None)
        H, W = layer.grid
        for h, ax in enumerate(axes[i]):
            ax.set_xticks([]), ax.set_yticks([])
            if h < len(maps):
                ax.imshow(maps[h], cmap="viridis")
                ax.add_patch(plt.Rectangle((W // 2 - 0.5, H // 2 - 0.5), 1, 1, fill=False, ec="black", lw=1))
            else:
                ax.axis("off")
        axes[i, 0].set_ylabel(f"layer {i + 1}", fontsize=7)
    for h in range(heads):
        axes[0, h].set_title(f"head {h + 1}", fontsize=7)
    return save(fig, out, "fig5_attention_maps", pdf)


def trajectory_figure(model, run: Path, layer_index: int, out, pdf):
    path = run / "heads.jsonl"
    if not path.exists():
        return []
    snapshots = [json.loads(line) for line in path.read_text().splitlines()]
    centers = np.array([s["layers"][layer_index - 1]["centers"] for s in snapshots])  # [epochs, heads, 2]
    layer = model.attention_layers[layer_index - 1]
    fig, ax = plt.subplots(figsize=(4.5, 4.5))
    draw_regions(ax, layer, central_maps(layer), "")
    colors = head_colors(centers.shape[1])
    for h in range(centers.shape[1]):
        ax.plot(centers[:, h, 1], centers[:, h, 0], "-", color=colors[h], lw=0.8, alpha=0.8)
        ax.plot(centers[0, h, 1], centers[0, h, 0], "x", color=colors[h], ms=5)
    ax.set_title(f"Layer {layer_index}: head centers from initialization (x) over "
                 f"{snapshots[-1]['epoch']} epochs, final regions", fontsize=8)
    return save(fig, out, f"fig2_centers_during_training_layer{layer_index}", pdf)


def accuracy_figure(runs: list, out, pdf, name):
    fig, ax = plt.subplots(figsize=(5, 3.2))
    for run in runs:
        path = run / "metrics.jsonl"
        if not path.exists():
            raise FileNotFoundError(f"{run} has no metrics.jsonl: not a run directory")
        metrics = [json.loads(line) for line in path.read_text().splitlines()]
        config = json.loads((run / "config.json").read_text())
        label = f"{run.name} ({config['encoding']}{', pruned' if isinstance(config['heads'], list) else ''})"
        ax.plot([m["epoch"] for m in metrics], [m["test_acc"] for m in metrics], label=label)
    ax.set_xlabel("epoch"), ax.set_ylabel("test accuracy")
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return save(fig, out, name, pdf)


def print_concentration(model, inputs):
    """How many keys hold half of each head's attention from the central query, per layer."""
    print("keys holding 50% of each head's attention (central query):")
    for i, layer in enumerate(model.attention_layers):
        maps = central_maps(layer, inputs[i] if layer.content else None)
        counts = [int((m >= mass_levels(m, [0.5])[0]).sum()) for m in maps]
        print(f"  layer {i + 1}: {counts}  (max probability {maps.flatten(1).max(1).values.max().item():.2f})")


def visualize(cfg: Config) -> list:
    checkpoint, path = train_lib.load_checkpoint(cfg.run)
    run = path.parent
    if cfg.at_init:
        config = train_lib.Config(**checkpoint["config"])
        torch.manual_seed(config.seed)  # as train.run does before building the model
        model = build_model(config.encoding, **train_lib.model_kwargs(config)).eval()
    else:
        model = train_lib.model_from_checkpoint(checkpoint).eval()
    out = Path(cfg.out or run / ("figures-init" if cfg.at_init else "figures"))
    written = []
    if hasattr(model, "attention_layers"):
        inputs = [None] * len(model.attention_layers)
        if any(layer.content for layer in model.attention_layers):
            config = checkpoint["config"]
            train, test = data_lib.load(config["dataset"], config["data_dir"], config["seed"])
            mean, std = data_lib.channel_stats(train.images)
            image = (test.images[cfg.image_index:cfg.image_index + 1].float() / 255 - mean.view(1, 3, 1, 1)) / std.view(1, 3, 1, 1)
            inputs = layer_inputs(model, image)
        n_layers = len(model.attention_layers)
        fig2_layer = cfg.layer or min(4, n_layers)
        if not 1 <= fig2_layer <= n_layers:
            raise ValueError(f"--layer {cfg.layer}: the model has layers 1..{n_layers}")
        print_concentration(model, inputs)
        heads = {layer.heads for layer in model.attention_layers}
        name = "fig6" if checkpoint["config"]["encoding"] == "gaussian" else "fig8" if heads == {16} else "fig3"
        written += region_figure(model, inputs, out, cfg.pdf, f"{name}_attention_regions")
        written += maps_figure(model, inputs, out, cfg.pdf)
        if not cfg.at_init:
            written += trajectory_figure(model, run, fig2_layer, out, cfg.pdf)
    if (run / "metrics.jsonl").exists() and not cfg.at_init:
        pruned = isinstance(checkpoint["config"]["heads"], list)
        runs = [run] + [Path(r) for r in cfg.compare]
        written += accuracy_figure(runs, out, cfg.pdf, "fig7_test_accuracy" if pruned else "fig4_test_accuracy")
    return written


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", help="run directory or checkpoint")
    parser.add_argument("--out", default="", help="folder for the figures (default RUN/figures)")
    parser.add_argument("--layer", type=int, default=Config.layer, help="layer of Fig. 2, 1-based (default 4, or the last)")
    parser.add_argument("--compare", nargs="*", default=[], help="more run directories for Figs. 4/7")
    parser.add_argument("--pdf", action="store_true", help="also write PDF files")
    parser.add_argument("--image-index", type=int, default=0, help="test image for content models")
    parser.add_argument("--at-init", action="store_true",
                        help="draw the run's model as initialized (same seed), to compare with the trained one")
    cfg = Config(**vars(parser.parse_args()))
    try:
        written = visualize(cfg)
    except (ValueError, FileNotFoundError, data_lib.DataError) as e:
        sys.exit(f"error: {e}")
    print(f"wrote {len(written)} files to {Path(written[0]).parent if written else '-'}: "
          f"{', '.join(Path(p).name for p in written)}")


if __name__ == "__main__":
    main()
