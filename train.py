"""Train on CIFAR-10 with the paper's recipe (section 4.1, Appendix A.4).

    python train.py --encoding quadratic                # the paper's run: 300 epochs (a GPU)
    python train.py --preset laptop --encoding quadratic  # Fig. 2's grid: 11 min on 2 AVX2 cores (fp32)
    python train.py --preset tiny --encoding learned    # a smoke run
    python train.py --resume runs/quadratic-paper       # continue exactly where a run stopped
    torchrun --nproc_per_node=4 train.py ...            # DistributedDataParallel, one process a GPU

Recipe: SGD (momentum 0.9, weight decay 1e-4 except on Gaussian centers and spreads), batch
100, learning rate 0.1 with a linear warm-up over the first 5% of steps, then cosine decay
to 0, stepped every batch; dropout 0.1, also on the attention probabilities. The test set
is evaluated after every epoch; the final epoch's accuracy is the result (the best-on-test
accuracy is logged, labelled as model selection on the test set). The run directory holds
config.json, metrics.jsonl (a line an epoch), checkpoint.pt (rewritten atomically after
every epoch) and heads.jsonl (every layer's head centers per epoch, for Fig. 2, or
the central query's probabilities, for Fig. 5).

Ctrl-C or SIGTERM stops at the next batch boundary and saves there: `--resume` then ends
with the weights of an uninterrupted run, bit for bit. A second Ctrl-C stops at once.

Reading order: `Config` (the recipe's numbers), `make_optimizers`, `warmup_cosine`,
`train_steps` (one epoch of A.4, a batch at a time) and `test_totals`. The `Trainer` after
them runs those an epoch at a time and adds what a long run needs.
"""
import json
import math
import os
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F

import data as data_lib
from measures import layer_measures
from flags import option, parse_flags
from attention import ENCODINGS
from model import MODELS, model_from_config
from records import (append_jsonl, atomic_save, checkpoint_dict, environment, head_snapshot, keep_epochs,
                     load_checkpoint)
from runtime import Precision, Progress, Stop, StopSignal, choose_precision, keep_freed_memory

PRECISIONS = ("fp32", "bf16", "fp16")
PRESETS = {
    "paper": {},  # Appendix A.4 and the authors' code: the defaults below
    # Both CPU presets differ from A.4 in: 2 layers of width 64 (FFN 128; ResNet18 of base
    # width 16) instead of 6 of 400, a few epochs instead of 300, and no attention dropout
    # (the separable fast path needs it off).
    # tiny: a smoke run: 20,000 training images, 5 epochs.
    "tiny": dict(layers=2, dim=64, ffn_dim=128, width=16, subset=20000, epochs=5, attention_dropout=0.0),
    # laptop: Fig. 2's grid on a CPU, 11 minutes on 2 AVX2 cores in fp32: all 50,000 training
    # images, 3 epochs (1,500 steps instead of 150,000); lr 0.05, since at A.4's 0.1 this small
    # model's training loss climbed; positional parameters learn 10x faster (their gradients
    # are tiny next to the value weights'); heads start on the 3x3 layout of a convolution plus
    # N(0, 0.5^2) jitter instead of N(0, 2^2); and alpha >= 1, so that no head widens to
    # uniform. From A.4's start layer 1 kept a lopsided set of pixels near where its heads
    # happened to start, and heads that widened never came back (README, RESULTS.md).
    "laptop": dict(layers=2, dim=64, ffn_dim=128, width=16, epochs=3, lr=0.05, position_lr=10.0,
                   attention_dropout=0.0, grid_start=True, center_std=0.5, min_alpha=1.0),
}


@dataclass
class Config:
    encoding: str = option("quadratic", "a SelfAttentionNet encoding, or resnet18", choices=MODELS)
    content: bool = option(False, "add the content term of eq. 8 to the attention logits")
    preset: str = option("paper", "defaults for every flag not given: paper (A.4), tiny (a smoke run) "
                                  "or laptop (Fig. 2's grid on a CPU)", choices=["paper", "tiny", "laptop"])
    dataset: str = option("cifar10", "CIFAR-10, or tiled motifs made in memory", choices=["cifar10", "synthetic"])
    data_dir: str = option("data", "folder with (or to receive) CIFAR-10")
    subset: int = option(0, "train on this many training images (0: all)")
    epochs: int = option(300, "training epochs")
    batch_size: int = option(100, "images a step, across all processes")
    lr: float = option(0.1, "peak learning rate of SGD")
    momentum: float = option(0.9, "SGD momentum")
    weight_decay: float = option(1e-4, "SGD weight decay (none on Gaussian centers and spreads)")
    position_lr: float = option(1.0, "learning-rate multiplier of the positional parameters (A.4: 1)")
    position_optimizer: str = option("sgd", "optimizer of the positional parameters: sgd (A.4), or adam, whose "
                                            "step does not shrink with their tiny gradients", choices=["sgd", "adam"])
    center_std: float = option(2.0, "standard deviation of the initial head centers (the authors' code: 2; "
                                    "the paper writes N(0, 2I), i.e. 1.41)")
    grid_start: bool = option(False, "start head h at the h-th shift of the 3x3 kernel plus that draw "
                                     "(ConViT's local init; A.4: no)")
    min_alpha: float = option(0.0, "floor of a quadratic head's alpha (A.4: 0): it cannot widen past it")
    spread_hold: float = option(0.0, "fraction of the steps during which every head's spread (quadratic alpha, "
                                     "gaussian Sigma^-1) keeps its start while the centers move (ours; A.4: 0)")
    warmup: float = option(0.05, "fraction of steps of linear warm-up")
    layers: int = option(6, "attention blocks")
    heads: object = option(9, "one number, or one per layer (pruned models)", type=int)
    dim: int = option(400, "hidden dimension (every head's D_h too)")
    ffn_dim: int = option(512, "feed-forward inner dimension")
    dropout: float = option(0.1, "dropout probability")
    attention_dropout: float = option(0.1, "dropout on the attention probabilities, one mask a step for "
                                           "the whole batch (the authors' code); 0 allows the separable fast path")
    width: int = option(64, "ResNet18 base width")
    eval_batch_size: int = option(500, "images a test batch")
    out: str = option("", "run directory (default runs/ENCODING-PRESET)")
    resume: str = option("", "run directory (or checkpoint) to continue")
    seed: int = option(0, "the one seed of the run")
    device: str = option("auto", "auto: cuda, then mps, then cpu")
    compile: bool = option(False, "torch.compile the model")
    precision: str = option("auto", "matrix products in fp32, or autocast to bf16, or to fp16 with a gradient "
                                    "scaler; auto: what the hardware computes natively (CUDA capability >= 8.0: "
                                    "bf16; below: fp16; a CPU: bf16 where it measures 1.5x fp32)",
                            choices=("auto",) + PRECISIONS)


def make_optimizers(model, cfg: Config) -> list:
    """SGD of A.4. A Gaussian head's center and spread (quadratic, gaussian) are not
    weight-decayed; learned tables and head keys are. Every positional parameter (all of an
    encoding's) takes `position_lr` times the learning rate; the spreads (alpha, Sigma^-1)
    have groups of their own, which `schedules` can hold still. The first group holds the
    rest. With `position_optimizer="adam"` the positional groups go to a second optimizer, Adam."""
    undecayed = {id(getattr(m, name)) for m in model.modules() for name in getattr(m, "undecayed", ())}
    spreads = {id(getattr(m, name)) for m in model.modules() for name in getattr(m, "spread", ())}
    groups = {}  # (positional, decayed, spread) -> parameters
    for name, p in model.named_parameters():
        groups.setdefault((".encoding." in name, id(p) not in undecayed, id(p) in spreads), []).append(p)
    groups = [dict(params=params, positional=positional, spread=spread,
                   lr=cfg.lr * (cfg.position_lr if positional else 1.0),
                   weight_decay=cfg.weight_decay if decayed else 0.0)
              for (positional, decayed, spread), params in sorted(groups.items())]
    to_adam = [cfg.position_optimizer == "adam" and g["positional"] for g in groups]
    adam = [g for g, a in zip(groups, to_adam) if a]
    sgd = torch.optim.SGD([g for g, a in zip(groups, to_adam) if not a], lr=cfg.lr, momentum=cfg.momentum)
    return [sgd, torch.optim.Adam(adam)] if adam else [sgd]


def warmup_cosine(total_steps: int, warmup: float, hold: float = 0.0):
    """Learning-rate factor at each step: linear from 1/w to 1 over w steps, then cosine to 0;
    0 for the first `hold` fraction of the steps."""
    w, held = max(1, round(warmup * total_steps)), round(hold * total_steps)

    def factor(step):
        if step < held:
            return 0.0
        if step < w:
            return (step + 1) / w
        return 0.5 * (1 + math.cos(math.pi * min(1.0, (step - w) / max(1, total_steps - w))))

    return factor


def schedules(optimizers, total_steps: int, cfg: Config) -> list:
    """One LambdaLR an optimizer: warm-up and cosine for every group; the spreads' groups are
    held at their start for the first `spread_hold` of the steps."""
    return [torch.optim.lr_scheduler.LambdaLR(o, [warmup_cosine(total_steps, cfg.warmup, cfg.spread_hold * g["spread"])
                                                  for g in o.param_groups]) for o in optimizers]


def train_steps(net, batches, optimizers, schedulers, precision: Precision):
    """A.4's training, a batch at a time: forward, cross-entropy, backward, an SGD step, the
    schedule's step. Yields each batch's loss, correct predictions and size."""
    net.train()
    for x, y in batches:
        with precision.autocast():
            logits = net(x).float()
        loss = F.cross_entropy(logits, y)
        for optimizer in optimizers:
            optimizer.zero_grad(set_to_none=True)
        precision.scaler.scale(loss).backward()  # fp16 scales the loss; otherwise loss.backward()
        for optimizer, scheduler in zip(optimizers, schedulers):
            precision.scaler.step(optimizer)  # otherwise optimizer.step()
            scheduler.step()
        precision.scaler.update()
        yield loss.detach(), (logits.argmax(1) == y).sum(), len(y)


def test_totals(model, batches, precision: Precision) -> torch.Tensor:
    """Summed cross-entropy, correct predictions and images over the test batches: [3]."""
    model.eval()
    totals = 0
    with torch.no_grad(), precision.autocast():
        for x, y in batches:
            logits = model(x).float()
            totals = totals + torch.stack([F.cross_entropy(logits, y, reduction="sum"), (logits.argmax(1) == y).sum(),
                                           torch.tensor(len(y), device=y.device)]).double()
    return totals


# ---- the run: flags, resume, logs, stop signals, progress, several processes ---------------
# (skip on first reading: it calls train_steps and test_totals above, an epoch at a time)

class TrainingError(RuntimeError):
    """Training cannot go on (a non-finite loss); the message says what is kept."""


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


# Settings that mean something for some models only; every other setting applies to all.
APPLIES = {name: ENCODINGS for name in ("layers", "heads", "dim", "ffn_dim", "dropout", "attention_dropout", "content",
                                         "position_lr", "position_optimizer")}
APPLIES |= {name: ("quadratic", "gaussian") for name in ("center_std", "grid_start", "spread_hold")}
APPLIES |= {"min_alpha": ("quadratic",), "width": ("resnet18",)}


def applies(name: str, encoding: str) -> bool:
    return encoding in APPLIES.get(name, MODELS)


def not_applied(cfg: Config) -> dict:
    """The settings of the run's preset that mean nothing to its model, left at their defaults."""
    return {k: v for k, v in PRESETS[cfg.preset].items() if not applies(k, cfg.encoding)}


def parse_config(argv=None) -> Config:
    """Flags override the preset, the preset overrides the defaults. A flag that means nothing
    to the chosen model is refused; a preset's setting that means nothing to it is left at its
    default (and recorded, `not_applied`). With --resume a run keeps its own settings: only
    --device may be given too."""
    given = parse_flags(Config, __doc__, argv)
    if "resume" in given and given.keys() - {"resume", "device"}:
        changed = ", ".join(flag(k) for k in sorted(given.keys() - {"resume", "device"}))
        raise ValueError(f"--resume continues a run with its own settings; {changed} cannot change them "
                         "(to train longer, start a new run: the schedule is fixed by --epochs)")
    encoding = given.get("encoding", Config.encoding)
    refused = [f"{flag(k)} (for {', '.join(APPLIES[k])} only)" for k in given if not applies(k, encoding)]
    if refused:
        raise ValueError(f"{', '.join(refused)} {'does' if len(refused) == 1 else 'do'} not apply to {encoding}")
    preset = {k: v for k, v in PRESETS[given.get("preset", "paper")].items() if applies(k, encoding)}
    return Config(**(preset | given))


def check_config(cfg: Config):
    """A ValueError naming the flag for any value that cannot work."""
    for name in ("epochs", "batch_size", "eval_batch_size", "layers", "dim", "ffn_dim", "width"):
        if getattr(cfg, name) < 1:
            raise ValueError(f"{flag(name)} must be at least 1, got {getattr(cfg, name)}")
    heads = [cfg.heads] if isinstance(cfg.heads, int) else cfg.heads
    if any(h < 1 for h in heads):
        raise ValueError(f"--heads must be at least 1, got {cfg.heads}")
    if cfg.subset < 0:
        raise ValueError(f"--subset must be 0 (all images) or a number of images, got {cfg.subset}")
    for name, low, high in (("lr", 0, math.inf), ("position_lr", 0, math.inf), ("momentum", 0, 1),
                            ("weight_decay", 0, math.inf), ("warmup", 0, 1), ("spread_hold", 0, 1), ("dropout", 0, 1),
                            ("attention_dropout", 0, 1)):
        if not low <= getattr(cfg, name) <= high or (name.endswith("dropout") and getattr(cfg, name) == 1):
            raise ValueError(f"{flag(name)} must lie in [{low}, {high}{')' if name.endswith('dropout') else ']'}, "
                             f"got {getattr(cfg, name)}")


def pick_device(name: str) -> torch.device:
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ValueError(f"--device {name}: not a device name (auto, cpu, cuda, cuda:1, mps)") from None
    available = dict(cuda=torch.cuda.is_available(), mps=torch.backends.mps.is_available()).get(device.type, True)
    if not available:
        raise ValueError(f"--device {name}: this machine has no {device.type.upper()} device; use --device cpu or auto")
    return device


class Trainer:
    """One run of the A.4 recipe: data, model, SGD and schedule, restored from a checkpoint."""

    def __init__(self, cfg: Config, device, rank: int, world: int, model=None, checkpoint=None):
        self.cfg, self.device, self.world, self.writer = cfg, device, world, rank == 0
        self.out = run_directory(cfg)
        train, test = data_lib.load(cfg.dataset, cfg.data_dir, cfg.seed)
        self.data = data_lib.identity(cfg.dataset, cfg.data_dir, cfg.seed)  # what the run read, for its record
        train = data_lib.training_subset(train, cfg.subset, cfg.seed)
        self.sizes = len(train.labels), len(test.labels)
        mean, std = data_lib.channel_stats(train.images)
        per_rank = cfg.batch_size // world
        self.train_batches = data_lib.Batches(train, per_rank, mean, std, True, cfg.seed, device, (rank, world))
        self.test_batches = data_lib.Batches(test, cfg.eval_batch_size, mean, std, False, cfg.seed, device, (rank, world))
        if not len(self.train_batches):
            raise ValueError(f"--batch-size {cfg.batch_size}: larger than the {len(train.labels)} training images")

        torch.manual_seed(cfg.seed)  # the one seed: model init and dropout; data randomness is keyed by it
        self.model = (model or model_from_config(asdict(cfg))).to(device)
        self.optimizers = make_optimizers(self.model, cfg)
        total_steps = cfg.epochs * len(self.train_batches)
        self.schedulers = schedules(self.optimizers, total_steps, cfg)
        self.epoch, self.step, self.history = 0, 0, []
        self.sums = torch.zeros(3, dtype=torch.float64, device=device)  # this epoch: loss sum, correct, seen
        self.seconds = 0.0  # this epoch's training seconds so far
        if checkpoint:
            self.restore(checkpoint)
        net = torch.nn.parallel.DistributedDataParallel(self.model) if world > 1 else self.model
        self.net = torch.compile(net) if cfg.compile else net
        self.precision = Precision(cfg.precision, device)
        if checkpoint and checkpoint.get("scaler"):
            self.precision.scaler.load_state_dict(checkpoint["scaler"])

    def restore(self, checkpoint: dict):
        self.model.load_state_dict(checkpoint["model"])
        if not checkpoint["optimizer"]:  # a starting point (a pruned model): train it from epoch 0
            return
        for things, key in ((self.optimizers, "optimizer"), (self.schedulers, "scheduler")):
            states = checkpoint[key] if isinstance(checkpoint[key], list) else [checkpoint[key]]  # one before Adam
            for thing, state in zip(things, states, strict=True):
                thing.load_state_dict(state)
        torch.set_rng_state(checkpoint["rng"]["torch"])
        if self.device.type == "cuda" and checkpoint["rng"]["cuda"]:
            torch.cuda.set_rng_state_all(checkpoint["rng"]["cuda"])
        self.epoch, self.step, self.history = checkpoint["epoch"], checkpoint["step"], checkpoint["metrics"]
        self.sums = torch.tensor(checkpoint["partial"][:3], dtype=torch.float64, device=self.device)
        self.seconds = checkpoint["partial"][3]

    def save(self):
        if self.writer:
            partial = self.sums.tolist() + [self.seconds]
            checkpoint = checkpoint_dict(self.model, self.optimizers, self.schedulers, self.cfg, self.epoch,
                                         self.step, partial, self.history)
            atomic_save(checkpoint | {"scaler": self.precision.scaler.state_dict()}, self.out / "checkpoint.pt")

    def start_logs(self, reason: str):
        """config.json, and the logs trimmed to the checkpoint's epoch (a resumed run rewrites the rest)."""
        self.out.mkdir(parents=True, exist_ok=True)
        record = asdict(self.cfg) | {"not_applied": not_applied(self.cfg), "data": self.data,
                                     "environment": environment(self.device) | {"precision": reason}}
        (self.out / "config.json").write_text(json.dumps(record, indent=1))
        keep_epochs(self.out / "metrics.jsonl", self.epoch)
        keep_epochs(self.out / "heads.jsonl", self.epoch)
        if self.epoch == 0 and self.step == 0 and head_snapshot(self.model):
            append_jsonl(self.out / "heads.jsonl", {"epoch": 0, "layers": head_snapshot(self.model)})
        print(f"{self.cfg.encoding} on {self.cfg.dataset} ({self.sizes[0]} train / {self.sizes[1]} test images), "
              f"{sum(p.numel() for p in self.model.parameters()):,} parameters, {self.device}"
              f", {reason}, {self.world} process(es) -> {self.out}", flush=True)

    def train_epoch(self, stop: StopSignal, progress: Progress):
        """The remaining batches of self.epoch, with running sums, progress, and a stop check
        before every batch."""
        started = time.time() - self.seconds
        step_started = time.time()

        def batches():  # the epoch's remaining batches; a stop request ends them at a boundary
            nonlocal step_started
            for batch in self.train_batches.epoch(self.epoch, self.step):
                signum = stop.requested()
                if signum:  # a batch boundary: what is saved here resumes exactly
                    self.seconds = time.time() - started
                    raise Stop(signum)
                step_started = time.time()
                yield batch

        for loss, correct, n in train_steps(self.net, batches(), self.optimizers, self.schedulers, self.precision):
            self.step += 1
            self.sums += torch.stack([loss * n, correct, torch.tensor(n, device=self.device)]).double()
            if self.step % 50 == 0 and not torch.isfinite(self.sums[0]):
                break
            progress.step(time.time() - step_started, self.epoch * len(self.train_batches) + self.step,
                          lambda: f"loss {self.sums[0].item() / self.sums[2].item():.3f}")
        progress.end_epoch()
        self.seconds = time.time() - started

    def evaluate(self) -> tuple:
        """(loss, accuracy) on the test set; with DDP each process takes its share of the images."""
        if self.world > 1:  # the replicas' buffers (BatchNorm statistics) as rank 0 holds them
            for buffer in self.model.buffers():
                dist.broadcast(buffer, 0)
        totals = test_totals(self.model, self.test_batches.epoch(0), self.precision)
        if self.world > 1:
            dist.all_reduce(totals)
        return (totals[0] / totals[2]).item(), (totals[1] / totals[2]).item()

    def end_epoch(self, started: float) -> dict:
        """Evaluate, log and checkpoint a trained epoch; its record (seconds count evaluation)."""
        sums = self.sums.clone()
        if self.world > 1:
            dist.all_reduce(sums)
        if not torch.isfinite(sums[0]):
            raise TrainingError(f"the training loss became {sums[0].item()} in epoch {self.epoch + 1}; "
                                f"the last good checkpoint (epoch {self.epoch}) is kept in {self.out}")
        test_loss, test_acc = self.evaluate()
        before = self.history[-1]["seconds"] if self.history else 0.0
        record = dict(epoch=self.epoch + 1, train_loss=sums[0].item() / sums[2].item(),
                      train_acc=sums[1].item() / sums[2].item(), test_loss=test_loss, test_acc=test_acc,
                      lr=self.optimizers[0].param_groups[0]["lr"], images_per_s=sums[2].item() / max(self.seconds, 1e-9),
                      seconds=before + time.time() - started)
        record["best_test_acc"] = max([test_acc] + [m["test_acc"] for m in self.history])
        if self.writer and getattr(self.model, "attention_layers", None):  # how convolution-like, per layer
            record["layers"] = layer_measures(self.model)
        self.history.append(record)
        if self.writer:  # logs first: a resumed run drops lines past its checkpoint's epoch
            append_jsonl(self.out / "metrics.jsonl", record)
            if head_snapshot(self.model):
                append_jsonl(self.out / "heads.jsonl", {"epoch": self.epoch + 1, "layers": head_snapshot(self.model)})
        self.epoch, self.step, self.seconds = self.epoch + 1, 0, 0.0
        self.sums.zero_()
        self.save()
        return record

    def print_epoch(self, r: dict):
        if self.writer:
            eta = (self.cfg.epochs - r["epoch"]) * r["seconds"] / r["epoch"]
            print(f"epoch {r['epoch']:>3}/{self.cfg.epochs}  train loss {r['train_loss']:.3f} acc {r['train_acc']:.3f}  "
                  f"test loss {r['test_loss']:.3f} acc {r['test_acc']:.3f}  lr {r['lr']:.4f}  "
                  f"{r['images_per_s']:.0f} img/s  {r['seconds']:.0f}s  ETA {eta / 60:.1f} min", flush=True)

    def check_replicas(self):
        """DDP keeps the replicas equal; check it, bit for bit."""
        flat = torch.cat([p.detach().flatten() for p in self.model.parameters()])
        reference = flat.clone()
        dist.broadcast(reference, 0)
        differ = (flat != reference).any().float()
        dist.all_reduce(differ)
        if self.writer:
            print(f"weights identical across {self.world} processes: {differ.item() == 0}")

    def fit(self) -> dict:
        """Every remaining epoch; Ctrl-C or SIGTERM saves at a batch boundary and raises Stop."""
        steps = len(self.train_batches)
        progress = Progress(steps, self.cfg.epochs * steps, self.cfg.batch_size, self.device, self.writer)
        with StopSignal(self.device, self.world, self.writer) as stop:
            try:
                while self.epoch < self.cfg.epochs:
                    started = time.time() - self.seconds
                    self.train_epoch(stop, progress)
                    self.print_epoch(self.end_epoch(started))
            except Stop:
                self.save()
                if self.writer:
                    print(f"stopped in epoch {self.epoch + 1} after {self.step} batches; saved. Continue with: "
                          f"python train.py --resume {self.out}", file=sys.stderr)
                raise
            except KeyboardInterrupt:
                if self.writer:
                    print(f"stopped without saving; {self.out / 'checkpoint.pt'} holds the last save", file=sys.stderr)
                raise
        if self.world > 1:
            self.check_replicas()
        return self.history[-1]


def run_directory(cfg: Config) -> Path:
    return Path(cfg.out or f"runs/{cfg.encoding}-{cfg.preset}")


def settle(cfg: Config, device, world: int) -> tuple:
    """The run's final config (a resumed run's own, precision decided), checkpoint (or None)
    and why it computes in that precision."""
    if cfg.resume:
        checkpoint, path = load_checkpoint(cfg.resume)
        config = dict(checkpoint["config"])
        if "bf16" in config:  # recorded before --precision
            config["precision"] = "bf16" if config.pop("bf16") else "fp32"
        cfg = Config(**(config | dict(resume=cfg.resume, device=cfg.device, out=str(path.parent))))
        return cfg, checkpoint, f"{cfg.precision}: as the run started"
    check_config(cfg)
    out = run_directory(cfg)
    if (out / "checkpoint.pt").exists() or (out / "metrics.jsonl").exists():
        raise ValueError(f"{out} holds a run: continue it with --resume {out}, or choose another --out")
    if cfg.batch_size % world:
        raise ValueError(f"--batch-size {cfg.batch_size} does not split over {world} processes")
    if cfg.precision != "auto":
        return cfg, None, f"{cfg.precision}: --precision"
    precision, reason = choose_precision(device)  # decided once, stored in the checkpoint: a resumed run computes alike
    if world > 1:  # every process computes as the first decided
        choice = torch.tensor(PRECISIONS.index(precision), device=device)
        dist.broadcast(choice, 0)
        precision = PRECISIONS[int(choice.item())]
    return replace(cfg, precision=precision), None, reason


def run(cfg: Config, model=None) -> dict:
    """Train `model` (or a new one from cfg) as cfg says; returns the last epoch's metrics."""
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    device = pick_device(cfg.device)
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    try:
        cfg, checkpoint, reason = settle(cfg, device, world)
        trainer = Trainer(cfg, device, rank, world, model, checkpoint)
        if trainer.epoch >= cfg.epochs:
            last = trainer.history[-1]
            print(f"{trainer.out} finished its {cfg.epochs} epoch{'s' * (cfg.epochs > 1)} (final test accuracy {last['test_acc']:.4f}); "
                  "nothing to do. To train longer, start a new run: the schedule is fixed by --epochs.")
            return last
        if trainer.writer:
            trainer.start_logs(reason)
        last = trainer.fit()
    finally:
        if world > 1 and dist.is_initialized():
            dist.destroy_process_group()
    if trainer.writer:
        print(f"final test accuracy (epoch {last['epoch']}): {last['test_acc']:.4f}; best on test, "
              f"i.e. model selection on the test set: {last['best_test_acc']:.4f}")
    return last


def main():
    keep_freed_memory()
    try:
        run(parse_config())
    except (data_lib.DataError, TrainingError, FileNotFoundError, ValueError) as e:
        sys.exit(f"error: {e}")
    except Stop as e:
        sys.exit(128 + e.signum)
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
