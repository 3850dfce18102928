"""A run's records: checkpoints, the per-epoch logs, and what computed them.

A run directory holds config.json (the flags, and `environment`: commit, whether the tree
had uncommitted changes, torch, device, the CPU with its matrix-unit class and any cap set on
PyTorch's instructions; a resumed run keeps each earlier part's in `earlier_parts`),
metrics.jsonl (a line an epoch), heads.jsonl (Figs. 2 and 5), steps.jsonl (with --log-every:
the measures and heads every few steps) and checkpoint.pt (everything `--resume` needs to
continue exactly).
"""
import dataclasses
import json
import os
import platform
import subprocess
from pathlib import Path

import torch
from torch import nn

from measures import central_probs, layer_measures
from model import model_from_config


# ---- checkpoints --------------------------------------------------------------------------

def checkpoint_dict(model, optimizers, schedulers, cfg, epoch: int, step: int = 0,
                    partial=(0.0, 0.0, 0.0, 0.0), metrics=()) -> dict:
    """Everything a run (`cfg`: its Config dataclass) needs to continue exactly; `partial`
    holds the running loss sum, correct count, images seen and training seconds of an
    unfinished epoch. Without optimizers it is a starting point: `--resume` trains the
    model from it from epoch 0."""
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []
    return dict(model=model.state_dict(), optimizer=[o.state_dict() for o in optimizers],
                scheduler=[s.state_dict() for s in schedulers], config=dataclasses.asdict(cfg), epoch=epoch, step=step,
                partial=list(partial), metrics=list(metrics), rng=dict(torch=torch.get_rng_state(), cuda=cuda))


def atomic_save(obj, path: Path):
    """Write to a temporary file, then rename: an interrupted save never leaves half a file."""
    tmp = path.with_suffix(".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def load_checkpoint(path) -> tuple:
    """(checkpoint dict, its path) from a checkpoint file or a run directory holding one."""
    path = Path(path)
    path = path / "checkpoint.pt" if path.is_dir() else path
    if not path.exists():
        raise FileNotFoundError(f"no checkpoint at {path}")
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception:
        raise ValueError(f"{path} is not a checkpoint of this project (torch.load cannot read it)") from None
    if not isinstance(checkpoint, dict) or not {"model", "config", "epoch"} <= checkpoint.keys():
        raise ValueError(f"{path} is not a checkpoint of this project (no model, config and epoch entries)")
    return checkpoint, path


def model_from_checkpoint(checkpoint: dict, at_init: bool = False) -> nn.Module:
    """The model a checkpoint describes (pruned models included), with its weights, or as the
    run initialized it (`at_init`: the run's seed, as train.py seeds before building)."""
    if at_init:
        torch.manual_seed(checkpoint["config"]["seed"])
        return model_from_config(checkpoint["config"])
    model = model_from_config(checkpoint["config"])
    model.load_state_dict(checkpoint["model"])
    return model


def kept_heads(run: Path, model: nn.Module) -> list:
    """Each layer's original head numbers: a pruned run keeps them in kept_heads.json, so its
    heads carry the numbers and colours of the unpruned figures."""
    path = run / "kept_heads.json"
    if path.exists():
        return json.loads(path.read_text())["layers"]
    return [list(range(layer.heads)) for layer in model.attention_layers]


# ---- the per-epoch logs -----------------------------------------------------------------

def head_snapshot(model) -> list:
    """Each position-only layer's heads (layer_snapshot): heads.jsonl's "layers"."""
    return [layer_snapshot(layer) for layer in getattr(model, "attention_layers", [])
            if hasattr(layer.encoding, "centers") or not layer.content]


def layer_snapshot(layer) -> dict:
    """A layer's heads, as lists: centers and widths (quadratic: alpha; gaussian: inv_cov), or
    for an encoding without centers the central query's probabilities [heads, H, W] to 4
    decimals (Fig. 5's maps)."""
    enc = layer.encoding
    if hasattr(enc, "centers"):
        extra = {"alpha": enc.alpha} if hasattr(enc, "alpha") else {"inv_cov": enc.inv_cov}
        return {k: v.detach().cpu().tolist() for k, v in ({"centers": enc.centers} | extra).items()}
    return {"central": central_probs(layer).cpu().double().numpy().round(4).tolist()}


def step_record(model, step: int, train_loss) -> dict:
    """A steps.jsonl line: the step (0: the start), the running training loss of its epoch, and
    each attention layer's measures (measures.py) with, for heads with centers, the heads."""
    layers = getattr(model, "attention_layers", [])
    heads = [layer_snapshot(layer) if hasattr(layer.encoding, "centers") else None for layer in layers]
    return {"step": step, "train_loss": train_loss, "layers": layer_measures(model), "heads": heads}


def append_jsonl(path: Path, record: dict):
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")


def keep_lines(path: Path, last: int, key: str = "epoch"):
    """Drop the lines whose `key` (epoch, or step) is past `last`: a resumed run writes them again."""
    if path.exists():
        lines = [l for l in path.read_text().splitlines() if json.loads(l)[key] <= last]
        path.write_text("".join(l + "\n" for l in lines))


# ---- what computed a run -----------------------------------------------------------------

# Environment variables that cap the instructions of ATen's kernels, oneDNN's and MKL's.
INSTRUCTION_LIMITS = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS")


def environment(device: torch.device) -> dict:
    """What a run record names: commit (and whether the tree had uncommitted changes), torch,
    device and hardware (a CPU with its matrix-unit class, and the instruction limits set for
    PyTorch's kernels: how one CPU computes as an older class, RESULTS.md section 6)."""
    def git(*args) -> str:
        try:
            return subprocess.run(["git", *args], capture_output=True, text=True, cwd=Path(__file__).parent,
                                  timeout=5).stdout.strip()
        except (OSError, subprocess.SubprocessError):  # no git, or one that hangs
            return ""

    commit = git("rev-parse", "--short", "HEAD")
    dirty = bool(git("status", "--porcelain", "--untracked-files=no", "--", "*.py")) if commit else None
    limits = "".join(f"; {name}={os.environ[name]}" for name in INSTRUCTION_LIMITS if name in os.environ)
    hardware = torch.cuda.get_device_name(device) if device.type == "cuda" else f"{cpu_name()} ({cpu_class()}{limits})"
    return dict(commit=commit or "unknown", dirty=dirty, torch=torch.__version__, device=str(device),
                hardware=hardware, cpu_threads=torch.get_num_threads())



def cpuinfo(key: str) -> list:
    """The values of `key` in Linux's /proc/cpuinfo, one per logical CPU (none elsewhere)."""
    path = Path("/proc/cpuinfo")
    lines = path.read_text().splitlines() if path.exists() else []
    return [line.split(":", 1)[1].strip() for line in lines if ":" in line and line.split(":", 1)[0].strip() == key]


def cpu_class(flags: set = None) -> str:
    """The widest matrix unit of an x86 CPU (Linux's flags): AMX, AVX512-BF16, AVX512, AVX2; else 'unknown'."""
    flags = set(" ".join(cpuinfo("flags")[:1]).split()) if flags is None else flags
    for flag, name in (("amx_bf16", "AMX"), ("avx512_bf16", "AVX512-BF16"), ("avx512f", "AVX512"), ("avx2", "AVX2")):
        if flag in flags:
            return name
    return "unknown"


def cpu_name() -> str:
    return (cpuinfo("model name") or [platform.processor() or platform.machine()])[0]
