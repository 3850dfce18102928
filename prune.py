"""Prune degenerate attention heads, then fine-tune (Appendix A.1).

    python prune.py runs/gaussian-paper                       # prune, report, fine-tune 100 epochs
    python prune.py lab/results/fig2/deep6-e6-s0 --epochs 1   # a 6-layer CPU run: 2 uniform heads go
    python prune.py ckpt.pt --no-finetune                     # only report and save the pruned model
    python prune.py lab/results/fig2/deep6-e6-s0 --epochs 1 --control   # also the unpruned model fine-tuned alike

The pruned run goes to runs/NAME-pruned, or to --out; never into a folder that holds a run.
NAME is the run's folder, or the checkpoint file's name without .pt.

A.1 calls a Gaussian head (eq. 16) degenerate in two cases. When Sigma^-1 is almost zero
(largest eigenvalue < 1e-5), the head attends to every pixel alike. When Sigma^-1 is almost
singular (condition number > 1e5), it attends to a thin stripe. A.1 judges Gaussian heads
only; we judge quadratic heads by the same rule. Their logit -alpha ||delta - Delta||^2 is
eq. 16 with Sigma^-1 = 2 alpha I, of condition number 1, so one goes when 2 alpha < 1e-5.

Pruning removes each such head's parameters and its block of the value projection
Linear(heads * D, D), so parameters and FLOPs really shrink. The pruned model is a checkpoint
that train.py and visualize.py load like any other. train.py's loop fine-tunes it at the learning
rate divided by 10, as A.1 says. It runs 100 epochs, as the authors' code does; A.1 says "a few".
The fine-tuning is a new run, in this machine's native precision (--precision auto), not the run's.
"""
import json
from dataclasses import dataclass, replace
from pathlib import Path

import torch

import train as train_lib
from data import Batches, DataError
from model import count_parameters, model_from_config, paper_flops
from records import is_pruned, kept_heads, load_checkpoint, model_from_checkpoint, run_name
from runtime import (PRECISIONS, TrainingError, choose_precision, command_line, option, output_folder, parse_flags,
                     pick_device)


@dataclass
class Config:
    checkpoint: str = option("", "checkpoint file or run directory")
    eigenvalue_below: float = option(1e-5, "prune heads whose largest eigenvalue of Sigma^-1 is below this "
                                           "(a quadratic head's Sigma^-1: 2 alpha I)")
    condition_above: float = option(1e5, "prune Gaussian heads whose Sigma^-1 has a larger condition number "
                                         "(the paper's text says 1e5; the authors' code used 1e3)")
    epochs: int = option(100, "fine-tuning epochs (the authors' code: 100; the paper: a few)")
    finetune: bool = option(True, "fine-tune after saving (--no-finetune: only report and save)")
    control: bool = option(False, "also fine-tune the unpruned model the same way (epochs, lr, precision, seed) "
                                  "into OUT-control: what the pruned model's fine-tuning is measured against")
    out: str = option("", "run directory of the pruned model (default runs/NAME-pruned)")
    device: str = option("auto", "auto: cuda, then mps, then cpu")
    precision: str = option("auto", "of the fine-tuning and the accuracies, as train.py's: auto is what this "
                                    "machine computes natively, whatever the run trained in",
                            choices=("auto",) + PRECISIONS)
    data_dir: str = option("", "CIFAR-10 folder for fine-tuning (default: the run's)")


def head_measures(layer) -> dict:
    """A.1's two measures of each head of an attention layer, from the head's Sigma^-1 (eq. 16).

    `layer`: a SelfAttention2d whose `encoding` is a Gaussian (`inv_cov` [heads, 2, 2], S S^T) or a
    Quadratic (`alpha` [heads]: eq. 15's logit is eq. 16's with Sigma^-1 = 2 alpha I). Returns
    {"largest eigenvalue": [heads], "condition": [heads]}, float64 tensors without gradient, head h
    at index h. The condition number is the largest eigenvalue over the smallest. It is inf where
    Sigma^-1 is singular: a smallest eigenvalue of 0, or below 0 by round-off (Sigma^-1 = 0 too)."""
    enc = layer.encoding
    inv_cov = enc.inv_cov if hasattr(enc, "inv_cov") else 2 * enc.alpha[:, None, None] * torch.eye(2, device=enc.alpha.device)
    eig = torch.linalg.eigvalsh(inv_cov.detach().double())  # ascending, [heads, 2]
    largest, smallest = eig[:, 1], eig[:, 0].clamp(min=0)
    condition = torch.where(smallest > 0, largest / smallest, torch.inf)  # singular (Sigma^-1 = 0 too): inf
    return {"largest eigenvalue": largest, "condition": condition}


def degenerate_heads(model, cfg: Config) -> list:
    """A.1's rule: for each layer of `model.attention_layers`, the indices of the heads to prune.

    A head goes when its largest eigenvalue of Sigma^-1 is below `cfg.eigenvalue_below` (it attends
    to every pixel alike), or when its condition number is above `cfg.condition_above` (a thin
    stripe), both as head_measures gives them. Returns a list per layer of ints, ascending; [] where
    no head goes."""
    pruned = []
    for layer in model.attention_layers:
        m = head_measures(layer)
        bad = (m["largest eigenvalue"] < cfg.eigenvalue_below) | (m["condition"] > cfg.condition_above)
        pruned.append(bad.nonzero().flatten().tolist())
    return pruned


def remove_heads(model, config: dict, pruned: list):
    """A new model without the pruned heads: (small, heads), `model` left as it was.

    `model`: the SelfAttentionNet that the run's `config` (a dict) describes. `pruned`: per layer,
    the heads to remove, as degenerate_heads gives them. `heads[i]` is layer i's head count less its
    pruned heads; `small` is model.model_from_config(config with heads=heads). It holds `model`'s
    weights less each pruned head's: its entry of every encoding parameter (the head is their first
    dimension) and its block of `dim` input columns of W_out = Linear(heads * dim, dim), eq. 11's
    W^(h). W_out's bias stays, and the kept heads keep their order. The weights are named
    blocks.{i}.attention.encoding.NAME and blocks.{i}.attention.W_out.weight in a state_dict."""
    heads = [layer.heads - len(p) for layer, p in zip(model.attention_layers, pruned)]
    small = model_from_config(config | dict(heads=heads))
    state = model.state_dict()
    for i, (layer, drop) in enumerate(zip(model.attention_layers, pruned)):
        keep = torch.tensor([h for h in range(layer.heads) if h not in drop])
        prefix = f"blocks.{i}.attention."
        for name, p in layer.encoding.named_parameters():
            state[prefix + "encoding." + name] = p.detach()[keep]  # head is the first dimension
        W = layer.W_out.weight.detach().view(layer.W_out.out_features, layer.heads, layer.dim)
        state[prefix + "W_out.weight"] = W[:, keep].reshape(layer.W_out.out_features, -1)
    small.load_state_dict(state)
    return small, heads


# ---- the command: what cannot be judged, the report, saving and fine-tuning -----------------

def check_prunable(config: dict, path: Path):
    if config["encoding"] not in ("gaussian", "quadratic"):
        raise ValueError(f"{path} is a {config['encoding']} model: it has no Gaussian heads whose "
                         "covariance could be judged (prune works on gaussian and quadratic models)")
    if config.get("content"):
        raise ValueError(f"{path} uses content attention: its heads are not position-only Gaussians")


def report(model, small, pruned: list, heads: list):
    """Each layer's pruned heads and their measures' range, then parameters and FLOPs before and after."""
    print(f"{'layer':>5}  {'heads pruned':>12}  {'kept':>4}  {'range over heads':<44}  pruned heads")
    for i, (layer, p) in enumerate(zip(model.attention_layers, pruned), start=1):
        ranges = ", ".join(f"{k} {v.min().item():.3g}..{v.max().item():.3g}" for k, v in head_measures(layer).items())
        print(f"{i:>5}  {len(p):>12}  {heads[i - 1]:>4}  {ranges:<44}  {p}")
    print(f"pruned per layer {[len(p) for p in pruned]} (the paper's Gaussian model, 300 epochs: [2, 4, 1, 2, 6, 0]), "
          f"{sum(map(len, pruned))} in all")
    if not any(pruned):
        return
    before, after = count_parameters(model), count_parameters(small)
    flops_before, flops_after = paper_flops(model), paper_flops(small)
    scale, unit = (1e9, "B") if flops_before >= 1e9 else (1e6, "M")
    print(f"parameters {before:,} -> {after:,} ({after / before - 1:+.1%}); FLOPs (paper convention) "
          f"{flops_before / scale:.2f}{unit} -> {flops_after / scale:.2f}{unit} ({flops_after / flops_before - 1:+.1%})")


def test_accuracy(models: list, cfg: train_lib.Config) -> list:
    """Each model's test accuracy as train.py evaluates it, with cfg's data, normalization and precision."""
    _, test_set, mean, std = train_lib.load_data(cfg)
    device = pick_device(cfg.device)
    batches = Batches(test_set, cfg.eval_batch_size, mean, std, False, cfg.seed, device)
    accuracies = []
    for model in models:
        _, correct, images = train_lib.evaluate(model.to(device), batches.epoch(0), cfg.precision).tolist()
        accuracies.append(correct / images)
    return accuracies


def table_2(rows: list):
    """Table 2's columns for the models of a pruning: (name, accuracy, parameters, FLOPs)."""
    print(f"\n{'model':<34}{'accuracy':>9}{'parameters':>12}{'FLOPs':>9}")
    for name, accuracy, parameters, flops in rows:
        print(f"{name:<34}{accuracy:>9.4f}{parameters:>12,}{flops / 1e6:>8.1f}M")


def prune(cfg: Config):
    """Report the degenerate heads, remove them, save, and fine-tune. Returns the new run
    directory, or None when no head is degenerate."""
    checkpoint, path = load_checkpoint(cfg.checkpoint)
    config = checkpoint["config"]
    default = f"runs/{run_name(path)}-pruned"
    saved = Path(cfg.out or default)
    if is_pruned(saved) and (saved / "checkpoint.pt").exists() and not (saved / "config.json").exists():
        # saved by --no-finetune: train.py --resume there would start its whole fine-tuning
        raise ValueError(f"{saved} holds a run (checkpoint.pt, kept_heads.json): a model that prune.py pruned "
                         f"and saved, not fine-tuned; choose another --out for a new one, or delete {saved}")
    out = output_folder(cfg.out, default)
    check_prunable(config, path)
    model = model_from_checkpoint(checkpoint)
    pruned = degenerate_heads(model, cfg)
    for i, (layer, p) in enumerate(zip(model.attention_layers, pruned), start=1):
        if len(p) == layer.heads:
            raise ValueError(f"every head of layer {i} is degenerate: pruning would remove the layer "
                             "(raise --condition-above or lower --eigenvalue-below)")
    small, heads = remove_heads(model, config, pruned)
    report(model, small, pruned, heads)
    if not any(pruned):
        print("no degenerate heads: nothing to prune, nothing saved")
        return None
    precision, reason = ((cfg.precision, f"{cfg.precision}: --precision") if cfg.precision != "auto"
                         else choose_precision(pick_device(cfg.device)))  # a bf16 run on an AVX2 CPU: fp32
    finetune = train_lib.Config(**config | dict(heads=heads, lr=config["lr"] / 10, epochs=cfg.epochs,
                                                out=str(out), resume="", device=cfg.device, precision=precision,
                                                data_dir=cfg.data_dir or config["data_dir"]))
    control = output_folder("", f"{out}-control") if cfg.control and cfg.finetune else None  # refused before any work
    out.mkdir(parents=True, exist_ok=True)
    train_lib.save_checkpoint(out / "checkpoint.pt", small, finetune)  # a starting point: no optimizer
    ids = [[i for h, i in enumerate(layer_ids) if h not in p] for layer_ids, p in zip(kept_heads(path.parent, model), pruned)]
    (out / "kept_heads.json").write_text(json.dumps({"layers": ids}))
    print(f"saved the pruned model to {out / 'checkpoint.pt'}")
    if cfg.finetune:
        before = test_accuracy([model, small], finetune)
        print(f"test accuracy {before[0]:.4f} -> {before[1]:.4f} pruned; fine-tuning {cfg.epochs} "
              f"epoch{'s' * (cfg.epochs != 1)} at lr {finetune.lr:g} in {reason}")
        after = train_lib.main(train_lib.Config(resume=str(out), device=cfg.device))["test_acc"]  # from the saved start
        epochs = f"fine-tuned {cfg.epochs} epoch{'s' * (cfg.epochs != 1)}"
        rows = [(run_name(path), before[0], count_parameters(model), paper_flops(model)),
                ("pruned", before[1], count_parameters(small), paper_flops(small)),
                (f"pruned, {epochs}", after, count_parameters(small), paper_flops(small))]
        if control:  # the unpruned model, fine-tuned as the pruned one was
            control.mkdir(parents=True, exist_ok=True)
            train_lib.save_checkpoint(control / "checkpoint.pt", model, replace(finetune, heads=config["heads"],
                                                                               out=str(control)))
            unpruned = train_lib.main(train_lib.Config(resume=str(control), device=cfg.device))["test_acc"]
            rows.append((f"unpruned, {epochs} (control)", unpruned, count_parameters(model), paper_flops(model)))
        table_2(rows)
    return out


if __name__ == "__main__":
    command_line(lambda: prune(Config(**parse_flags(Config, __doc__, positional=("checkpoint",)))),
                 (ValueError, FileNotFoundError, DataError, TrainingError))
