"""A run's records: its folder, checkpoints, logs and progress, and what computed them.

A run folder holds config.json (the flags, the data's name and checksum, and `environment`:
commit, whether tracked Python files had uncommitted changes, torch, device, the CPU with its
matrix-unit class and any cap set on PyTorch's instructions; a resumed run keeps each
earlier part's in `earlier_parts`), metrics.jsonl (one line per epoch, with each attention
layer's measures), heads.jsonl (the heads per epoch, Figs. 2 and 5), steps.jsonl (with
--log-every: the measures and heads every few steps, and at step 0) and checkpoint.pt
(train.save_checkpoint: everything `--resume` needs to continue exactly).

Every command writes under runs/ unless told otherwise, and never into a folder that holds
a run, unless it resumes that run (runtime.output_folder).
"""
import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

import data as data_lib
from measures import central_probs, layer_measures
from model import model_from_config
from runtime import Progress

# ---- run folders and checkpoints --------------------------------------------------------------

def run_name(path) -> str:
    """What a run is called after: its folder's name, or a checkpoint file's stem (ckpt.pt: ckpt)."""
    path = Path(path)
    return path.parent.resolve().name if path.name == "checkpoint.pt" else path.stem


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


def is_pruned(run: Path) -> bool:
    """A run of prune.py's: it holds kept_heads.json (a list of heads per layer alone may be a run's flags)."""
    return (run / "kept_heads.json").exists()


def kept_heads(run: Path, model: nn.Module) -> list:
    """Each layer's original head numbers: a pruned run keeps them in kept_heads.json, so its
    heads carry the numbers and colours of the unpruned figures."""
    if is_pruned(run):
        return json.loads((run / "kept_heads.json").read_text())["layers"]
    return [list(range(layer.heads)) for layer in model.attention_layers]


# ---- the per-epoch logs -----------------------------------------------------------------

def head_snapshot(model) -> list:
    """Each attention layer's heads (layer_snapshot), but a content layer's only when it has centers
    (its maps would depend on the image): heads.jsonl's "layers"."""
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


class Run:
    """Where a training run stands, and what it writes. The checkpoint saves `epoch` (epochs
    done), `step` (batches done in this epoch, counted by train.py's loop: where a resume
    restarts), `history` (one record per epoch) and `seconds` (this epoch's training time so
    far). Its first process writes config.json, the .jsonl logs and the lines on stdout and
    stderr."""

    def __init__(self, out: Path, cfg, model, device, world: int, writer: bool, steps_per_epoch: int, reason: str):
        self.out, self.cfg, self.model, self.device, self.world, self.writer = out, cfg, model, device, world, writer
        self.steps_per_epoch, self.reason = steps_per_epoch, reason
        self.epoch, self.step, self.history, self.seconds = 0, 0, [], 0.0
        self.epoch_started = self.step_started = 0.0  # wall-clock times (start_epoch, log_step)

    @property
    def global_step(self) -> int:
        return self.epoch * self.steps_per_epoch + self.step

    def begin(self, optimizer, train_images: int, test_images: int):
        """Say what trains, and start (or trim, when resumed) the logs."""
        eval_share = test_images / (3 * train_images * self.cfg.eval_every)  # a test image: a third of a step's work
        self.progress = Progress(self.steps_per_epoch, self.cfg.epochs * self.steps_per_epoch, self.cfg.batch_size,
                                 self.device, self.writer, eval_share)
        if not self.writer:
            return
        self.out.mkdir(parents=True, exist_ok=True)
        data = data_lib.identity(self.cfg.dataset, self.cfg.data_dir, self.cfg.seed)  # what the run read
        now = environment(self.device)
        record = asdict(self.cfg) | {"not_applied": self.cfg.not_applied(), "data": data,
                                     "environment": now | {"precision": self.reason}}
        moved = ""  # resumed elsewhere: what computes otherwise than in the part before
        if self.global_step:  # resumed: what computed each earlier part, with the step it stopped at
            before = json.loads((self.out / "config.json").read_text())
            parts = before.get("earlier_parts", [])
            if not parts or parts[-1]["until_step"] < self.global_step:  # a part that made no step is left out
                parts = parts + [before["environment"] | {"until_step": self.global_step}]
            record["earlier_parts"] = parts
            moved = changes(parts[-1], now)  # against the part that made the checkpoint's last step
        (self.out / "config.json").write_text(json.dumps(record, indent=1))
        keep_lines(self.out / "metrics.jsonl", self.epoch)  # a resumed run writes the rest again
        keep_lines(self.out / "heads.jsonl", self.epoch)
        keep_lines(self.out / "steps.jsonl", self.global_step, key="step")
        if self.global_step == 0 and head_snapshot(self.model):
            append_jsonl(self.out / "heads.jsonl", {"epoch": 0, "layers": head_snapshot(self.model)})
        if self.global_step == 0 and self.cfg.log_every:
            append_jsonl(self.out / "steps.jsonl", step_record(self.model, 0, None))
        print(f"{self.cfg.encoding} on {self.cfg.dataset} ({train_images} train / {test_images} test images), "
              f"{sum(p.numel() for p in self.model.parameters()):,} parameters, {self.device}"
              f", {self.reason}, {self.world} process(es) -> {self.out}", flush=True)
        print("SGD groups: " + "; ".join(f"{sum(p.numel() for p in g['params']):,} parameters at lr {g['initial_lr']:g}, "
                                         f"weight decay {g['weight_decay']:g}"
                                         + (" (the spreads: alpha or Sigma^-1/2)" if g["spread"] else "")
                                         for g in optimizer.param_groups), flush=True)
        if moved:
            print(f"resumed on other hardware or software ({moved}): it goes on in {self.cfg.precision}, "
                  "but not bit for bit as one uninterrupted part would", flush=True)

    def start_epoch(self):
        """Start the epoch's clock where its saved training time left it."""
        self.epoch_started = time.time() - self.seconds
        self.step_started = time.time()

    def log_step(self, sums: torch.Tensor):
        """After a step: its time and the running loss to the progress line (stderr), and every
        --log-every steps the layers' measures and heads to steps.jsonl. `sums`: the epoch's
        running loss sum, correct predictions and images."""
        now = time.time()
        seconds, self.step_started, self.seconds = now - self.step_started, now, now - self.epoch_started
        if self.writer and self.cfg.log_every and self.global_step % self.cfg.log_every == 0:
            loss = sums[0].item() / sums[2].item()  # this epoch's so far
            append_jsonl(self.out / "steps.jsonl", step_record(self.model, self.global_step, loss))
        self.progress.step(seconds, self.global_step, lambda: f"loss {sums[0].item() / sums[2].item():.3f}")

    def end_epoch(self, sums: torch.Tensor, test_sums: torch.Tensor, lr: float) -> dict:
        """The epoch's record (sums: loss, correct, images, over every process; seconds count
        evaluation) in metrics.jsonl, its heads in heads.jsonl, its line on stdout. An epoch
        between evaluations (--eval-every; test_sums of no images) has test loss and accuracy None."""
        self.progress.end_epoch()
        before = self.history[-1]["seconds"] if self.history else 0.0
        tested = test_sums[2].item() > 0
        test_loss, test_acc = (test_sums[:2] / test_sums[2]).tolist() if tested else (None, None)
        r = dict(epoch=self.epoch + 1, train_loss=sums[0].item() / sums[2].item(),
                 train_acc=sums[1].item() / sums[2].item(), test_loss=test_loss, test_acc=test_acc, lr=lr,
                 images_per_s=sums[2].item() / max(self.seconds, 1e-9), seconds=before + time.time() - self.epoch_started)
        r["best_test_acc"] = max((m["test_acc"] for m in self.history + [r] if m["test_acc"] is not None), default=None)
        if self.writer and getattr(self.model, "attention_layers", None):  # how convolution-like, per layer
            r["layers"] = layer_measures(self.model)
        self.history.append(r)
        if self.writer:  # logs first: a resumed run drops lines past its checkpoint's epoch
            append_jsonl(self.out / "metrics.jsonl", r)
            if head_snapshot(self.model):
                append_jsonl(self.out / "heads.jsonl", {"epoch": r["epoch"], "layers": head_snapshot(self.model)})
            eta = (self.cfg.epochs - r["epoch"]) * r["seconds"] / r["epoch"]
            test = f"test loss {test_loss:.3f} acc {test_acc:.3f}" if tested else "not tested this epoch"
            print(f"epoch {r['epoch']:>3}/{self.cfg.epochs}  train loss {r['train_loss']:.3f} acc {r['train_acc']:.3f}  "
                  f"{test}  lr {r['lr']:.4f}  "
                  f"{r['images_per_s']:.0f} img/s  {r['seconds']:.0f}s  ETA {eta / 60:.1f} min", flush=True)
        self.epoch, self.step, self.seconds = self.epoch + 1, 0, 0.0
        return r

    def stopped(self):
        if self.writer:
            print(f"stopped in epoch {self.epoch + 1} after {self.step} batches; saved. Continue with: "
                  f"python train.py --resume {self.out}", file=sys.stderr)

    def finish(self) -> dict:
        """The last epoch's record, said; with several processes, their weights checked equal."""
        if self.world > 1:
            flat = torch.cat([p.detach().flatten() for p in self.model.parameters()])
            reference = flat.clone()
            dist.broadcast(reference, 0)
            differ = (flat != reference).any().float()
            dist.all_reduce(differ)
            if self.writer:
                print(f"weights identical across {self.world} processes: {differ.item() == 0}")
        last = self.history[-1]
        if self.writer:
            print(f"final test accuracy (epoch {last['epoch']}): {last['test_acc']:.4f}; best on test, "
                  f"i.e. model selection on the test set: {last['best_test_acc']:.4f}")
        return last


# ---- what computed a run -----------------------------------------------------------------

# Environment variables that cap the instructions of ATen's kernels, oneDNN's and MKL's.
INSTRUCTION_LIMITS = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS")


def environment(device: torch.device) -> dict:
    """What a run record names: commit (and whether the tree had uncommitted changes), torch,
    device and hardware (a CPU with its matrix-unit class, and the instruction limits set for
    PyTorch's kernels: how one CPU computes as an older class, lab/RESULTS.md section 6)."""
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


def changes(before: dict, now: dict) -> str:
    """What computes a resumed run otherwise than its part before: another torch, device, CPU or
    thread count sums in another order (the same precision, other roundings); '' when nothing."""
    return "; ".join(f"{key} {before.get(key)} -> {now[key]}" for key in ("torch", "device", "hardware", "cpu_threads")
                     if before.get(key) != now[key])


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
