"""Train on CIFAR-10 with the paper's recipe (section 4.1, Appendix A.4).

    python train.py --encoding quadratic              # the paper's run: 300 epochs (a GPU)
    python train.py --preset tiny --encoding learned  # a small model, ~10 minutes on a 2-core CPU
    python train.py --resume runs/quadratic-paper     # continue exactly where a run stopped
    torchrun --nproc_per_node=4 train.py ...          # DistributedDataParallel, one process a GPU

Recipe: SGD (momentum 0.9, weight decay 1e-4 except on positional parameters), batch 100,
learning rate 0.1 with a linear warm-up over the first 5% of steps, then cosine decay to 0,
stepped every batch. The test set is evaluated after every epoch; the final epoch's
accuracy is the result (the best-on-test accuracy is logged, labelled as model selection
on the test set). The run directory holds config.json, metrics.jsonl (a line an epoch),
checkpoint.pt (rewritten atomically after every epoch and on Ctrl-C) and heads.jsonl
(every layer's head centers per epoch, for Fig. 2).
"""
import argparse
import contextlib
import json
import math
import os
import platform
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F

import data as data_lib
from model import MODELS, build_model

PRESETS = {
    "paper": {},  # every value of Appendix A.4: the defaults below
    # ~10 minutes on a 2-core CPU: the paper's recipe, a 2-layer model of width 64 (ResNet18 of
    # base width 16), 20,000 training images, 5 epochs
    "tiny": dict(layers=2, dim=64, ffn_dim=128, width=16, subset=20000, epochs=5),
}


def option(default, help: str):
    return field(default=default, metadata={"help": help})


@dataclass
class Config:
    encoding: str = option("quadratic", "a SelfAttentionNet encoding, or resnet18")
    content: bool = option(False, "add the content term of eq. 8 to the attention logits")
    preset: str = option("paper", "defaults for every flag not given: paper (A.4) or tiny (CPU)")
    dataset: str = option("cifar10", "cifar10 or synthetic")
    data_dir: str = option("data", "folder with (or to receive) CIFAR-10")
    subset: int = option(0, "train on this many training images (0: all)")
    epochs: int = option(300, "training epochs")
    batch_size: int = option(100, "images a step, across all processes")
    lr: float = option(0.1, "peak learning rate of SGD")
    momentum: float = option(0.9, "SGD momentum")
    weight_decay: float = option(1e-4, "SGD weight decay, none on positional parameters")
    warmup: float = option(0.05, "fraction of steps of linear warm-up")
    layers: int = option(6, "attention blocks")
    heads: object = option(9, "one number, or one per layer (pruned models)")
    dim: int = option(400, "hidden dimension (every head's D_h too)")
    ffn_dim: int = option(512, "feed-forward inner dimension")
    dropout: float = option(0.1, "dropout probability")
    width: int = option(64, "ResNet18 base width")
    eval_batch_size: int = option(500, "images a test batch")
    out: str = option("", "run directory (default runs/ENCODING-PRESET)")
    resume: str = option("", "run directory (or checkpoint) to continue")
    seed: int = option(0, "the one seed of the run")
    device: str = option("auto", "auto: cuda, then mps, then cpu")
    compile: bool = option(False, "torch.compile the model")
    bf16: bool = option(True, "bf16 autocast on CUDA")


CHOICES = dict(encoding=MODELS, preset=list(PRESETS), dataset=["cifar10", "synthetic"])


class TrainingError(RuntimeError):
    """Training cannot go on (a non-finite loss); the message says what is kept."""


def parse_config(argv=None) -> Config:
    """Flags override the preset, the preset overrides the defaults."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     argument_default=argparse.SUPPRESS)
    for f in fields(Config):
        flag = "--" + f.name.replace("_", "-")
        text = f"{f.metadata['help']} (default {f.default!r})"
        if f.type is bool:
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, help=text)
        elif f.name in CHOICES:
            parser.add_argument(flag, choices=CHOICES[f.name], help=text)
        else:
            parser.add_argument(flag, type=int if f.name == "heads" else f.type, help=text)
    args = vars(parser.parse_args(argv))
    return Config(**(PRESETS[args.get("preset", "paper")] | args))


def model_kwargs(cfg: Config) -> dict:
    if cfg.encoding == "resnet18":
        return dict(width=cfg.width)
    return dict(layers=cfg.layers, heads=cfg.heads, dim=cfg.dim, ffn_dim=cfg.ffn_dim,
                dropout=cfg.dropout, content=cfg.content)


def pick_device(name: str) -> torch.device:
    if name != "auto":
        return torch.device(name)
    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    if torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def cpu_name() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    lines = cpuinfo.read_text().splitlines() if cpuinfo.exists() else []
    names = [line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")]
    return names[0] if names else platform.processor() or platform.machine()


def environment(device) -> dict:
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=Path(__file__).parent, timeout=5).stdout.strip()
    except OSError:
        commit = ""
    hardware = torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name()
    return dict(commit=commit or "unknown", torch=torch.__version__, device=str(device), hardware=hardware,
                cpu_threads=torch.get_num_threads())


def make_optimizer(model, cfg: Config) -> torch.optim.SGD:
    """Positional parameters (centers, widths, Sigma^-1/2, tables) are not weight-decayed."""
    positional = [p for n, p in model.named_parameters() if ".encoding." in n]
    others = [p for n, p in model.named_parameters() if ".encoding." not in n]
    groups = [dict(params=others, weight_decay=cfg.weight_decay), dict(params=positional, weight_decay=0.0)]
    return torch.optim.SGD(groups, lr=cfg.lr, momentum=cfg.momentum)


def warmup_cosine(total_steps: int, warmup: float):
    """Learning-rate factor at each step: linear from 1/w to 1 over w steps, then cosine to 0."""
    w = max(1, round(warmup * total_steps))

    def factor(step):
        if step < w:
            return (step + 1) / w
        return 0.5 * (1 + math.cos(math.pi * min(1.0, (step - w) / max(1, total_steps - w))))

    return factor


def head_snapshot(model) -> list:
    """Each layer's head parameters, as lists (quadratic: centers, alpha; gaussian: centers, inv_cov)."""
    layers = []
    for layer in getattr(model, "attention_layers", []):
        enc = layer.encoding
        if hasattr(enc, "centers"):
            extra = {"alpha": enc.alpha} if hasattr(enc, "alpha") else {"inv_cov": enc.inv_cov}
            layers.append({k: v.detach().cpu().tolist() for k, v in ({"centers": enc.centers} | extra).items()})
    return layers


def checkpoint_dict(model, optimizer, scheduler, cfg: Config, epoch: int, step: int = 0,
                    partial=(0.0, 0.0, 0.0, 0.0), metrics=()) -> dict:
    """Everything a run needs to continue exactly (DESIGN section 10); `partial` holds the
    running loss sum, correct count, images seen and seconds of an unfinished epoch. Without
    an optimizer it is a starting point: `--resume` trains the model from it from epoch 0."""
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []
    return dict(model=model.state_dict(), optimizer=optimizer and optimizer.state_dict(),
                scheduler=scheduler and scheduler.state_dict(), config=asdict(cfg), epoch=epoch, step=step,
                partial=list(partial), metrics=list(metrics), rng=dict(torch=torch.get_rng_state(), cuda=cuda))


def load_checkpoint(path) -> tuple:
    """(checkpoint dict, its path) from a checkpoint file or a run directory holding one."""
    path = Path(path)
    path = path / "checkpoint.pt" if path.is_dir() else path
    if not path.exists():
        raise FileNotFoundError(f"no checkpoint at {path}")
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        raise ValueError(f"{path} is not a checkpoint of this project ({type(e).__name__}: {e})") from None
    if not isinstance(checkpoint, dict) or not {"model", "config", "epoch"} <= checkpoint.keys():
        raise ValueError(f"{path} is not a checkpoint of this project (no model, config and epoch entries)")
    return checkpoint, path


def model_from_checkpoint(checkpoint: dict):
    """The model a checkpoint describes, with its weights (pruned models included)."""
    cfg = Config(**checkpoint["config"])
    model = build_model(cfg.encoding, **model_kwargs(cfg))
    model.load_state_dict(checkpoint["model"])
    return model


def atomic_save(obj, path: Path):
    tmp = path.with_suffix(".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def append_jsonl(path: Path, record: dict):
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")


def keep_epochs(path: Path, last: int):
    """Drop lines of epochs after `last` (a resumed run writes them again)."""
    if path.exists():
        lines = [l for l in path.read_text().splitlines() if json.loads(l)["epoch"] <= last]
        path.write_text("".join(l + "\n" for l in lines))


class Progress:
    """A bar within the epoch on a terminal; four lines an epoch in a log file."""

    def __init__(self, total: int, enabled: bool):
        self.total, self.enabled, self.tty = total, enabled, sys.stderr.isatty()
        self.last, self.next_quarter = 0.0, total // 4

    def update(self, step: int, text):
        if not self.enabled:
            return
        if self.tty and time.time() - self.last > 0.5:
            bar = "#" * (30 * step // self.total)
            print(f"\r  [{bar:<30}] {step}/{self.total} {text()}", end="", file=sys.stderr, flush=True)
            self.last = time.time()
        elif not self.tty and step >= self.next_quarter > 0:
            print(f"  {step}/{self.total} {text()}", file=sys.stderr, flush=True)
            self.next_quarter += self.total // 4

    def close(self):
        if self.enabled and self.tty:
            print("\r" + " " * 79 + "\r", end="", file=sys.stderr, flush=True)


def evaluate(model, batches, autocast, world: int) -> tuple:
    model.eval()
    totals = torch.zeros(3, dtype=torch.float64, device=batches.device)  # loss sum, correct, count
    with torch.no_grad(), autocast():
        for x, y in batches.epoch(0):
            logits = model(x).float()
            totals += torch.stack([F.cross_entropy(logits, y, reduction="sum"),
                                   (logits.argmax(1) == y).sum(), torch.tensor(len(y), device=y.device)]).double()
    if world > 1:
        dist.all_reduce(totals)
    return (totals[0] / totals[2]).item(), (totals[1] / totals[2]).item()


def run(cfg: Config, model=None) -> dict:
    """Train `model` (or a new one from cfg) as cfg says; returns the last epoch's metrics."""
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    device = pick_device(cfg.device)
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    if cfg.batch_size % world:
        raise ValueError(f"batch size {cfg.batch_size} does not split over {world} processes")
    checkpoint = None
    if cfg.resume:
        checkpoint, path = load_checkpoint(cfg.resume)
        cfg = Config(**(checkpoint["config"] | dict(resume=cfg.resume, device=cfg.device, out=str(path.parent))))
    out = Path(cfg.out or f"runs/{cfg.encoding}-{cfg.preset}")
    torch.manual_seed(cfg.seed)  # the one seed: model init and dropout; data randomness is keyed by it

    train, test = data_lib.load(cfg.dataset, cfg.data_dir, cfg.seed)
    if cfg.subset:
        keep = torch.randperm(len(train.labels), generator=data_lib.generator("cpu", cfg.seed, -1))[:cfg.subset]
        train = data_lib.Split(train.images[keep], train.labels[keep])
    mean, std = data_lib.channel_stats(train.images)
    per_rank = cfg.batch_size // world
    train_batches = data_lib.Batches(train, per_rank, mean, std, True, cfg.seed, device, (rank, world))
    test_batches = data_lib.Batches(test, cfg.eval_batch_size, mean, std, False, cfg.seed, device, (rank, world))

    model = (model or build_model(cfg.encoding, **model_kwargs(cfg))).to(device)
    optimizer = make_optimizer(model, cfg)
    total_steps = cfg.epochs * len(train_batches)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_cosine(total_steps, cfg.warmup))
    start_epoch, start_step, partial, history = 0, 0, [0.0, 0.0, 0.0, 0.0], []
    if checkpoint:
        model.load_state_dict(checkpoint["model"])
    if checkpoint and checkpoint["optimizer"]:
        optimizer.load_state_dict(checkpoint["optimizer"])
        scheduler.load_state_dict(checkpoint["scheduler"])
        torch.set_rng_state(checkpoint["rng"]["torch"])
        if device.type == "cuda" and checkpoint["rng"]["cuda"]:
            torch.cuda.set_rng_state_all(checkpoint["rng"]["cuda"])
        start_epoch, start_step, partial = checkpoint["epoch"], checkpoint["step"], checkpoint["partial"]
        history = checkpoint["metrics"]

    writer = rank == 0
    if writer:
        out.mkdir(parents=True, exist_ok=True)
        (out / "config.json").write_text(json.dumps(asdict(cfg) | {"environment": environment(device)}, indent=1))
        keep_epochs(out / "metrics.jsonl", start_epoch)
        keep_epochs(out / "heads.jsonl", start_epoch)
        if start_epoch == 0 and start_step == 0 and head_snapshot(model):
            append_jsonl(out / "heads.jsonl", {"epoch": 0, "layers": head_snapshot(model)})
        print(f"{cfg.encoding} on {cfg.dataset} ({len(train.labels)} train / {len(test.labels)} test images), "
              f"{sum(p.numel() for p in model.parameters()):,} parameters, {device}, {world} process(es) -> {out}")

    net = torch.nn.parallel.DistributedDataParallel(model) if world > 1 else model
    net = torch.compile(net) if cfg.compile else net
    bf16 = cfg.bf16 and device.type == "cuda"
    autocast = (lambda: torch.autocast("cuda", torch.bfloat16)) if bf16 else contextlib.nullcontext

    def save(epoch, step, partial):
        if writer:
            atomic_save(checkpoint_dict(model, optimizer, scheduler, cfg, epoch, step, partial, history),
                        out / "checkpoint.pt")

    epoch, step = start_epoch, start_step
    sums = torch.tensor(partial[:3], dtype=torch.float64, device=device)  # loss sum, correct, seen
    seconds, started = partial[3], time.time()
    try:
        for epoch in range(start_epoch, cfg.epochs):
            net.train()
            if epoch > start_epoch:
                sums.zero_()
                seconds, started, step = 0.0, time.time(), 0
            seen_before = sums[2].item()
            bar = Progress(len(train_batches), writer)
            for x, y in train_batches.epoch(epoch, step):
                with autocast():
                    logits = net(x).float()
                loss = F.cross_entropy(logits, y)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                scheduler.step()
                step += 1
                sums += torch.stack([loss.detach() * len(y), (logits.argmax(1) == y).sum(),
                                     torch.tensor(len(y), device=device)]).double()
                if step % 50 == 0 and not torch.isfinite(sums[0]):
                    break
                bar.update(step, lambda: f"loss {sums[0].item() / sums[2].item():.3f}")
            bar.close()
            elapsed = time.time() - started
            images = (sums[2].item() - seen_before) * world
            if world > 1:
                dist.all_reduce(sums)
            if not torch.isfinite(sums[0]):
                raise TrainingError(f"the training loss became {sums[0].item()} in epoch {epoch + 1}; "
                                    f"the last good checkpoint (epoch {epoch}) is kept in {out}")
            seconds += elapsed
            test_loss, test_acc = evaluate(net, test_batches, autocast, world)
            record = dict(epoch=epoch + 1, train_loss=sums[0].item() / sums[2].item(),
                          train_acc=sums[1].item() / sums[2].item(), test_loss=test_loss, test_acc=test_acc,
                          lr=optimizer.param_groups[0]["lr"], images_per_s=images / max(elapsed, 1e-9),
                          seconds=seconds)
            record["best_test_acc"] = max([test_acc] + [m["test_acc"] for m in history])
            history.append(record)
            if writer:  # logs first: a resumed run drops lines past its checkpoint's epoch
                append_jsonl(out / "metrics.jsonl", record)
                if head_snapshot(model):
                    append_jsonl(out / "heads.jsonl", {"epoch": epoch + 1, "layers": head_snapshot(model)})
            save(epoch + 1, 0, [0.0, 0.0, 0.0, 0.0])
            if writer:
                eta = (cfg.epochs - epoch - 1) * sum(m["seconds"] for m in history) / len(history)
                print(f"epoch {epoch + 1:>3}/{cfg.epochs}  train loss {record['train_loss']:.3f} acc {record['train_acc']:.3f}  "
                      f"test loss {test_loss:.3f} acc {test_acc:.3f}  lr {record['lr']:.4f}  "
                      f"{record['images_per_s']:.0f} img/s  {seconds:.0f}s  ETA {eta / 60:.1f} min", flush=True)
    except KeyboardInterrupt:
        save(epoch, step, sums.tolist() + [seconds + time.time() - started])
        if writer:
            print(f"\ninterrupted in epoch {epoch + 1} after {step} batches; saved. Continue with: "
                  f"python train.py --resume {out}", file=sys.stderr)
        raise
    else:
        if world > 1:  # DDP keeps replicas equal; check it, bit for bit
            flat = torch.cat([p.detach().flatten() for p in model.parameters()])
            reference = flat.clone()
            dist.broadcast(reference, 0)
            differ = (flat != reference).any().float()
            dist.all_reduce(differ)
            if writer:
                print(f"weights identical across {world} processes: {differ.item() == 0}")
    finally:
        if world > 1 and dist.is_initialized():
            dist.destroy_process_group()
    if writer and history:
        last = history[-1]
        print(f"final test accuracy (epoch {last['epoch']}): {last['test_acc']:.4f}; best on test, "
              f"i.e. model selection on the test set: {last['best_test_acc']:.4f}")
    return history[-1] if history else {}


def main():
    cfg = parse_config()
    try:
        run(cfg)
    except (data_lib.DataError, TrainingError, FileNotFoundError, ValueError) as e:
        sys.exit(f"error: {e}")
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
