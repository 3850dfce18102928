"""The paper's figures from a run directory or checkpoint (Figs. 2-8), and how
convolution-like each layer is.

    python visualize.py runs/quadratic-paper [--out DIR] [--pdf] [--layer 4]
    python visualize.py runs/gaussian-paper --compare runs/quadratic-paper runs/resnet18-paper

Writes, for the model in the checkpoint:
- fig3/fig6/fig8 (quadratic 9 heads / gaussian / 16 heads; other encodings: fig3 style):
  every layer's heads as their 50% (solid) and 90% (dotted) probability regions around the
  central query pixel (black), one colour per head, on the pixel grid. The regions come from
  the layer's own probabilities: the smallest set of keys holding that mass.
- fig2: the centers of one layer's heads moving over training, as a picture and as an
  animated GIF: every --log-every steps (steps.jsonl) where the run logged them, else every
  epoch (heads.jsonl).
- fig5: the attention map of every head (columns) at every layer (rows) for the central query.
- fig4 (fig7 for a pruned run): test accuracy per epoch of this run and of any --compare runs;
  locality: each layer's 3x3 locality (the share of its kernel's energy in the 3x3 window
  around the query) at initialization and trained, for the same runs.
- measures.json: each layer's locality, one-pixel heads, grid coverage and, for a trained run
  with centers, how far each head travelled from its start (measures.py), also printed.
For content models (eq. 8) the probabilities depend on the image: a test image is used.
Below the `# ----` line: what it prints, and the locality figure (measures.py's numbers).
"""
import json
from dataclasses import dataclass
from pathlib import Path

import matplotlib
import matplotlib.animation
import matplotlib.pyplot as plt
import numpy as np
import torch

import data as data_lib
import measures
from attention import RowColumn
from records import environment, is_pruned, kept_heads, load_checkpoint, model_from_checkpoint, run_name
from runtime import command_line, option, output_folder, parse_flags


@dataclass
class Config:
    run: str = option("", "run directory or checkpoint")
    out: str = option("", "folder for the figures (default runs/figures/NAME, NAME the run's folder, + '-init' "
                          "with --at-init); never a folder that holds a run")
    layer: int = option(0, "the layer of Fig. 2, 1-based (default: 4 as in the paper, or the last)")
    compare: list = option([], "more run directories for Figs. 4/7 and the locality plot", nargs="*")
    pdf: bool = option(False, "also write PDF files")
    image_index: int = option(0, "the test image for content models")
    at_init: bool = option(False, "the run's model as train.py initialized it (same seed), not trained")


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


def draw_regions(ax, layer, maps, title, head_ids=None):
    """Each head's 50% (solid) and 90% (dotted) region, in the colour of its number."""
    H, W = layer.grid
    head_ids = range(maps.shape[0]) if head_ids is None else head_ids
    colors = head_colors(max(head_ids) + 1)
    rows, cols = np.arange(H) - H // 2, np.arange(W) - W // 2
    uniform = []
    for h, head in enumerate(head_ids):
        t50, t90 = mass_levels(maps[h])
        fine = fine_density(layer, h)
        r, c, density = (x.numpy() for x in fine) if fine else (rows, cols, maps[h].numpy())
        ax.plot([], [], "-", color=colors[head], label=f"head {head + 1}")
        if density.max() < 1.01 * density.min():  # a uniform head has no region to draw
            uniform.append(str(head + 1))
            continue
        for level, style in ((t90, ":"), (t50, "-")):
            if density.max() > level > density.min():
                ax.contour(c, r, density, levels=[level], colors=[colors[head]], linestyles=style, linewidths=1.2)
            else:  # the region is one key: mark it
                peak = np.argwhere(density == density.max())[0]
                ax.plot(c[peak[1]], r[peak[0]], "o", color=colors[head], ms=4)
    if uniform:
        ax.text(0.02, 0.02, f"uniform: head {', '.join(uniform)}", transform=ax.transAxes, fontsize=6)
    ax.add_patch(plt.Rectangle((-0.5, -0.5), 1, 1, color="black"))
    ax.set_xticks(cols[::2]), ax.set_yticks(rows[::2])
    ax.set_xticks(cols - 0.5, minor=True), ax.set_yticks(rows - 0.5, minor=True)
    ax.grid(which="minor", color="0.9", lw=0.5)
    ax.set_xlim(cols[0] - 0.5, cols[-1] + 0.5), ax.set_ylim(rows[-1] + 0.5, rows[0] - 0.5)
    ax.set_xlabel("column shift", fontsize=7), ax.set_ylabel("row shift", fontsize=7)
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


def region_figure(model, inputs, ids, out, pdf, name):
    layers = model.attention_layers
    fig, axes = plt.subplots(1, len(layers), figsize=(2.6 * len(layers), 3.1), squeeze=False)
    for i, (layer, ax) in enumerate(zip(layers, axes[0])):
        draw_regions(ax, layer, measures.central_probs(layer, inputs[i] if layer.content else None), f"layer {i + 1}", ids[i])
        ax.set_ylabel("row shift" if i == 0 else "", fontsize=7)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=7)
    fig.suptitle("Attention of each head around the central query (solid 50%, dotted 90% of its probability)", fontsize=9)
    return save(fig, out, name, pdf)


def maps_figure(model, inputs, ids, out, pdf):
    layers = model.attention_layers
    heads = max(max(i) for i in ids) + 1
    fig, axes = plt.subplots(len(layers), heads, figsize=(1.1 * heads + 0.6, 1.15 * len(layers)), squeeze=False)
    for i, layer in enumerate(layers):
        maps = measures.central_probs(layer, inputs[i] if layer.content else None).numpy()
        H, W = layer.grid
        for ax in axes[i]:
            ax.axis("off")
        for h, head in enumerate(ids[i]):
            image = axes[i, head].imshow(maps[h], cmap="viridis", vmin=0, vmax=1)
            axes[i, head].add_patch(plt.Rectangle((W // 2 - 0.5, H // 2 - 0.5), 1, 1, fill=False, ec="black", lw=1))
        axes[i, 0].text(-0.15, 0.5, f"layer {i + 1}", fontsize=7, rotation=90, va="center", ha="right",
                        transform=axes[i, 0].transAxes)
    for h in range(heads):
        axes[0, h].set_title(f"head {h + 1}", fontsize=7)
    bar = fig.colorbar(image, ax=axes, fraction=0.02, pad=0.02)
    bar.set_label("probability (central query: box)", fontsize=7)
    bar.ax.tick_params(labelsize=6)
    return save(fig, out, "fig5_attention_maps", pdf)


def draw_trajectories(ax, layer, snapshots: list, ids: list, title: str):
    """Fig. 2: the heads' centers from initialization (x) to the last snapshot (a dot), its regions."""
    centers = np.array([s["centers"] for s in snapshots])  # [snapshots, heads, 2]
    last = measures.layer_at(layer, snapshots[-1])
    draw_regions(ax, last, measures.central_probs(last), title, ids)
    colors = head_colors(max(ids) + 1)
    for h, head in enumerate(ids):
        ax.plot(centers[:, h, 1], centers[:, h, 0], "-", color=colors[head], lw=0.8, alpha=0.8)
        ax.plot(centers[0, h, 1], centers[0, h, 0], "x", color=colors[head], ms=5)  # start: x, as prove.py's
        ax.plot(centers[-1, h, 1], centers[-1, h, 0], "o", color=colors[head], ms=3)  # end: a dot
    ax.legend(loc="center left", bbox_to_anchor=(1.02, 0.5), fontsize=7)


def head_snapshots(run: Path, layer_index: int) -> list:
    """(when, the layer's heads) over training: every --log-every steps from steps.jsonl where
    the run logged it, else every epoch from heads.jsonl; [] for heads without centers."""
    steps, epochs = run / "steps.jsonl", run / "heads.jsonl"
    if steps.exists():
        lines = [json.loads(line) for line in steps.read_text().splitlines()]
        found = [(f"{l['step']:,} steps", l["heads"][layer_index - 1]) for l in lines if len(l["heads"]) >= layer_index]
    elif epochs.exists():
        lines = [json.loads(line) for line in epochs.read_text().splitlines()]
        found = [(f"{l['epoch']} epoch{'s' * (l['epoch'] != 1)}", l["layers"][layer_index - 1])
                 for l in lines if len(l["layers"]) >= layer_index]
    else:
        return []
    return found if found and "centers" in (found[0][1] or {}) else []  # no centers: Fig. 5's maps instead


def trajectory_figure(model, run: Path, layer_index: int, ids, out, pdf, frames: int = 60) -> list:
    """Fig. 2 as a picture and, over training in at most `frames` frames, as an animated GIF."""
    snapshots = head_snapshots(run, layer_index)
    if not snapshots:
        return []
    layer, ids = model.attention_layers[layer_index - 1], ids[layer_index - 1]
    heads = [heads for _, heads in snapshots]
    name = f"fig2_centers_during_training_layer{layer_index}"
    fig, ax = plt.subplots(figsize=(4.5, 4.5))

    def frame(n):
        ax.clear()
        draw_trajectories(ax, layer, heads[:n + 1], ids, f"Layer {layer_index}: each head's center from its start (x) "
                          f"over {snapshots[n][0]} to its end (dot), and its regions")

    shown = sorted(set(np.linspace(0, len(snapshots) - 1, min(frames, len(snapshots))).round().astype(int).tolist()))
    animation = matplotlib.animation.FuncAnimation(fig, frame, frames=shown)
    out.mkdir(parents=True, exist_ok=True)
    animation.save(out / f"{name}.gif", writer=matplotlib.animation.PillowWriter(fps=max(2, len(shown) // 10)), dpi=90)
    frame(len(snapshots) - 1)
    return save(fig, out, name, pdf) + [out / f"{name}.gif"]


def accuracy_figure(runs: list, out, pdf, name):
    fig, ax = plt.subplots(figsize=(5, 3.2))
    for run in runs:
        path = run / "metrics.jsonl"
        if not path.exists():
            raise FileNotFoundError(f"{run} has no metrics.jsonl: not a run directory")
        metrics = [json.loads(line) for line in path.read_text().splitlines()]
        config = json.loads((run / "config.json").read_text())
        label = f"{run.name} ({config['encoding']}{', pruned' if is_pruned(run) else ''})"
        ax.plot([m["epoch"] for m in metrics], [m["test_acc"] for m in metrics], "-o", ms=3, label=label)
    ax.set_xlabel("epoch"), ax.set_ylabel("test accuracy")
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return save(fig, out, name, pdf)


def visualize(cfg: Config) -> list:
    checkpoint, path = load_checkpoint(cfg.run)
    run = path.parent
    model = model_from_checkpoint(checkpoint, cfg.at_init).eval()
    out = output_folder(cfg.out, f"runs/figures/{run_name(path)}{'-init' if cfg.at_init else ''}")
    written = []
    if hasattr(model, "attention_layers"):
        inputs = [None] * len(model.attention_layers)
        if any(layer.content for layer in model.attention_layers):
            config = checkpoint["config"]
            train, test = data_lib.load(config["dataset"], config["data_dir"], config["seed"])
            train = data_lib.training_subset(train, config["subset"], config["seed"])  # the run's statistics
            mean, std = data_lib.channel_stats(train.images)
            image = (test.images[cfg.image_index:cfg.image_index + 1].float() / 255 - mean.view(1, 3, 1, 1)) / std.view(1, 3, 1, 1)
            inputs = layer_inputs(model, image)
        n_layers = len(model.attention_layers)
        fig2_layer = cfg.layer or min(4, n_layers)
        if not 1 <= fig2_layer <= n_layers:
            raise ValueError(f"--layer {cfg.layer}: the model has layers 1..{n_layers}")
        print_concentration(model, inputs)
        source = dict(run=str(path), epoch=0 if cfg.at_init else checkpoint.get("epoch"),
                      seed=checkpoint["config"].get("seed"), environment=environment(torch.device("cpu")))
        written.append(print_measures(run_measures(model, run, not cfg.at_init,
                                                   checkpoint["config"].get("center_std", 2.0)), out, source))
        heads = {layer.heads for layer in model.attention_layers}
        name = "fig6" if checkpoint["config"]["encoding"] == "gaussian" else "fig8" if heads == {16} else "fig3"
        ids = kept_heads(run, model)
        written += region_figure(model, inputs, ids, out, cfg.pdf, f"{name}_attention_regions")
        written += maps_figure(model, inputs, ids, out, cfg.pdf)
        if not cfg.at_init:
            written += trajectory_figure(model, run, fig2_layer, ids, out, cfg.pdf)
    if (run / "metrics.jsonl").exists() and not cfg.at_init:
        runs = [run] + [Path(r) for r in cfg.compare]
        written += accuracy_figure(runs, out, cfg.pdf, "fig7_test_accuracy" if is_pruned(run) else "fig4_test_accuracy")
        if hasattr(model, "attention_layers") and not any(layer.content for layer in model.attention_layers):
            written += locality_figure(runs, out, cfg.pdf)
    return written


# ---- what visualize.py prints: how convolution-like each layer is (measures.py) --------------

def print_concentration(model, inputs):
    """How many keys hold half of each head's attention from the central query, per layer."""
    print("keys holding 50% of each head's attention (central query):")
    for i, layer in enumerate(model.attention_layers):
        maps = measures.central_probs(layer, inputs[i] if layer.content else None)
        counts = [int((m >= mass_levels(m, [0.5])[0]).sum()) for m in maps]
        print(f"  layer {i + 1}: {counts}  (max probability {maps.flatten(1).max(1).values.max().item():.2f})")


def print_measures(found: list, out: Path, source: dict) -> Path:
    """Print how convolution-like each layer is, and how far its heads travelled; write them to
    out/measures.json with their `source` (the run, its epoch and seed, what computed them), its path returned."""
    print("how convolution-like each layer is (central query; measures.py):")
    for i, m in enumerate(found):
        if m is None:
            print(f"  layer {i + 1}: content layer: no fixed kernel")
            continue
        print(f"  layer {i + 1}: locality (share of its kernel's energy) in 3x3 {m['locality_3x3']:.3f}, "
              f"5x5 {m['locality_5x5']:.3f}; the heads' probability in 3x3 {m['mass_3x3']:.3f}, "
              f"5x5 {m['mass_5x5']:.3f}")
        pixels = (f"{m['one_pixel_heads']} one-pixel heads on {m['one_pixel']} pixels ({m['inside_3x3']} in the 3x3 "
                  f"window, {m['inside_5x5']} in the 5x5), {m['ring']} of the 8 around the query, "
                  f"on {m['sides']} of its 4 sides")
        if "coverage" in m:
            pixels += f"; coverage {m['coverage']}"
        if "distance" in m:
            pixels += f"; centers {m['distance']:.2f} px from the query on average"
        print(f"           {pixels}")
        if "travel" in m:  # a trained run's heads against their start (measures.origins)
            print(f"           travel (net distance from the start): mean {m['travel_mean']:.2f} px, "
                  f"max {m['travel_max']:.2f} px; path (summed epoch to epoch) {m['path_mean']:.2f} px; "
                  f"{m['travelled']} one-pixel heads moved 1 px or more")
            print(f"           the start: nearest to {m['start_pixels']} distinct pixels; of the one-pixel heads' "
                  f"{m['one_pixel']} pixels, {m['already_nearest']} were a head's nearest then "
                  f"(chance, a fresh start's: {m['already_nearest_chance']:.1f}); {m['own_start']} one-pixel heads "
                  f"sit on their own start's nearest pixel (chance, the start's pixels dealt at random: "
                  f"{m['own_start_chance']:.1f})")
    out.mkdir(parents=True, exist_ok=True)
    (out / "measures.json").write_text(json.dumps(source | {"layers": found}, indent=1))
    return out / "measures.json"


def run_measures(model, run: Path, trained: bool, center_std: float) -> list:
    """measures.layer_measures, with each layer's travel from heads.jsonl for a trained run."""
    found = measures.layer_measures(model)
    path = run / "heads.jsonl"
    if trained and path.exists():
        snapshots = [json.loads(line) for line in path.read_text().splitlines()]
        for m, moved in zip(found, measures.layer_travel(model, snapshots, center_std)):
            if m is not None and moved is not None:
                m |= moved
    return found


def locality_figure(runs: list, out, pdf):
    """Locality (3x3) of every layer at initialization and trained, one line pair a run."""
    fig, ax = plt.subplots(figsize=(4.5, 3.2))
    for run, color in zip(runs, plt.cm.tab10(np.arange(len(runs)))):
        if not (Path(run) / "checkpoint.pt").exists():
            print(f"locality figure: {run} has no checkpoint.pt (its weights were not kept); left out")
            continue
        checkpoint, _ = load_checkpoint(run)
        for at_init, style in ((True, ":"), (False, "-")):
            model = model_from_checkpoint(checkpoint, at_init).eval()
            if not hasattr(model, "attention_layers") or any(l.content for l in model.attention_layers):
                break  # no fixed kernel to measure
            values = [measures.locality(layer, 3) for layer in model.attention_layers]
            label = f"{Path(run).name} ({'init' if at_init else 'trained'})"
            ax.plot(range(1, len(values) + 1), values, style, marker="o", color=color, label=label)
    ax.set_xlabel("layer"), ax.set_ylabel("locality: kernel energy in 3x3")
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    ax.set_ylim(0, 1), ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return save(fig, out, "locality", pdf)


def main():
    matplotlib.use("Agg")  # files only, no window (set here: importing this module changes no backend)
    written = visualize(Config(**parse_flags(Config, __doc__, positional=("run",))))
    print(f"wrote {len(written)} files to {Path(written[0]).parent if written else '-'}: "
          f"{', '.join(Path(p).name for p in written)}")


if __name__ == "__main__":
    command_line(main, (ValueError, FileNotFoundError, data_lib.DataError))
