"""Train on CIFAR-10 with the paper's recipe (section 4.1, Appendix A.4).

    python train.py --preset laptop                      # 2 layers of width 64 on a CPU, in minutes (README)
    python train.py --encoding quadratic                 # the paper's run: 300 epochs (a GPU)
    python train.py --preset tiny --encoding learned     # a smoke run
    python train.py --resume runs/quadratic-laptop       # continue exactly where a run stopped
    torchrun --nproc_per_node=4 train.py ...             # DistributedDataParallel, one process per GPU

Read it top to bottom. First the settings (`Config`, A.4's defaults), the optimizer and its
schedule. Then one epoch of training, `train_epoch`: forward, loss, backward, step. Then
evaluation and the checkpoint. Last, `main`: data, model, optimizer, schedule, resume, and the
loop over epochs. The loop saves a checkpoint after each evaluation and at a Ctrl-C.
Below the `# ----` line: how a run starts (its folder, resume, precision, processes), the
presets and the checks of the flags. records.py and runtime.py hold what a long run needs
besides (its files, progress, signals, the process); no line there computes a step.
"""
import contextlib
import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

import data as data_lib
from attention import ENCODINGS, FastSelfAttention2d
from measures import head_overlap
from model import MODELS, model_from_config
from records import Run, atomic_save, load_checkpoint
from runtime import (COMPILE_MODES, DTYPES, PRECISIONS, Stop, StopSignal, TrainingError, command_line, compiled,
                     decide_precision, flag, option, output_folder, parse_flags, pick_device, processes)


@dataclass
class Config:
    # A.4's recipe; where A.4 is silent, the authors' code (said so)
    epochs: int = option(300, "training epochs")
    batch_size: int = option(100, "images per step, across all processes")
    lr: float = option(0.1, "peak learning rate of SGD")
    momentum: float = option(0.9, "SGD momentum")
    weight_decay: float = option(1e-4, "SGD weight decay (the authors' code: none on Gaussian centers and spreads)")
    warmup: float = option(0.05, "fraction of the steps of linear warm-up (A.4's ratio), then cosine decay")
    dropout: float = option(0.1, "dropout probability")
    # the model of section 4.1
    encoding: str = option("quadratic", "a SelfAttentionNet encoding, or resnet18", choices=MODELS)
    content: bool = option(False, "add the content term of eq. 8 to the attention logits")
    layers: int = option(6, "attention blocks")
    heads: object = option(9, "heads of every layer, or one number per layer (a pruned model)", type=int, nargs="+")
    dim: int = option(400, "hidden dimension (every head's D_h too)")
    ffn_dim: int = option(512, "feed-forward inner dimension")
    attention_dropout: float = option(0.1, "dropout on the attention probabilities (the authors' code)")
    center_std: float = option(2.0, "standard deviation of the initial head centers (the authors' code: 2; "
                                    "the paper's N(0, 2I) has variance 2: 1.414)")
    width: int = option(64, "ResNet18 base width")
    # ours, for short runs on a CPU (the paper has none of them)
    position_lr: float = option(1.0, "learning-rate multiplier of the positional parameters (paper: 1)")
    spread_hold: float = option(0.0, "fraction of the steps during which every head's spread keeps its start "
                                     "while the centers move (paper: 0); the spread is set by quadratic alpha or "
                                     "gaussian Sigma^-1/2, inverse widths: the larger, the narrower the head")
    grid_start: bool = option(False, "start head h at the h-th shift of the sqrt(heads) x sqrt(heads) kernel "
                                     "(3x3 for 9) plus its draw (ConViT's local init; paper: no)")
    min_alpha: float = option(0.0, "floor of a quadratic head's alpha (paper: 0): it cannot widen past it")
    overlap: float = option(0.0, "weight in the loss of the heads' overlap, measures.head_overlap (paper: 0)")
    # the run: data, preset, records and machinery (records.py, runtime.py)
    dataset: str = option("cifar10", "CIFAR-10, or tiled motifs made in memory", choices=["cifar10", "synthetic"])
    data_dir: str = option("data", "folder with (or to receive) CIFAR-10")
    subset: int = option(0, "train on this many training images (0: all)")
    preset: str = option("paper", "defaults for every flag not given: paper (A.4), tiny (a smoke run) "
                                  "or laptop (2 layers of width 64 on a CPU)", choices=["paper", "tiny", "laptop"])
    eval_batch_size: int = option(500, "images per test batch")
    eval_every: int = option(1, "evaluate and save the checkpoint every this many epochs and after the last "
                                "(a stop signal saves whenever it comes)")
    log_every: int = option(0, "every this many steps (and at step 0), the layers' measures and heads to "
                               "steps.jsonl (0: none)")
    out: str = option("", "run directory (default runs/ENCODING-PRESET)")
    resume: str = option("", "run directory (or checkpoint) to continue")
    seed: int = option(0, "the one seed of the run")
    device: str = option("auto", "auto: cuda, then mps, then cpu")
    compile: str = option("", "torch.compile the model, with eager's dropout masks; reduce-overhead: also replay "
                              "each step as CUDA graphs (a GPU only)", choices=COMPILE_MODES, nargs="?", const="default")
    precision: str = option("auto", "matrix products in fp32, or autocast to bf16, or to fp16 with a gradient "
                                    "scaler; auto: what the hardware computes natively (runtime.choose_precision)",
                            choices=("auto",) + PRECISIONS)

    def not_applied(self) -> dict:
        """The settings of the run's preset that mean nothing to its model, left at their defaults."""
        return {k: v for k, v in PRESETS[self.preset].items() if not applies(k, self.encoding)}


def make_optimizer(model, cfg: Config, device: torch.device) -> torch.optim.SGD:
    """SGD with A.4's momentum and weight decay.

    As in the authors' code, a head's center and its spread (alpha, or Sigma^-1/2) take no weight
    decay: the encoding lists them as `undecayed`. Ours: --position-lr scales the learning rate
    of every positional parameter, and --spread-hold holds the spreads still for a while.
    `fused=True` updates every parameter in one kernel: the same arithmetic, fewer launches."""
    undecayed = {id(getattr(m, name)) for m in model.modules() for name in getattr(m, "undecayed", ())}
    spreads = {id(getattr(m, name)) for m in model.modules() for name in getattr(m, "spread", ())}
    groups = {}  # (positional, decayed, spread) -> parameters
    for name, p in model.named_parameters():
        groups.setdefault((".encoding." in name, id(p) not in undecayed, id(p) in spreads), []).append(p)
    return torch.optim.SGD([dict(params=params, spread=spread, lr=cfg.lr * (cfg.position_lr if positional else 1.0),
                                 weight_decay=cfg.weight_decay if decayed else 0.0)
                            for (positional, decayed, spread), params in sorted(groups.items())],
                           lr=cfg.lr, momentum=cfg.momentum, fused=True if device.type in ("cpu", "cuda") else None)


def warmup_cosine(total_steps: int, warmup: float, hold: float = 0.0):
    """A.4's learning-rate schedule, stepped every batch: a function factor(step) -> float, the
    multiple of the peak learning rate at a 0-based step (torch's LambdaLR calls it).

    The warm-up takes w = max(1, round(warmup * total_steps)) steps: the factor rises linearly,
    in equal increments, from 1/w at step 0 to 1 at step w - 1. Then a half cosine decays it from
    1 at step w to 0 at step total_steps; it stays 0 after. The factor is 0 at every step before
    round(hold * total_steps) (--spread-hold); from there on it is the schedule's value at that step."""
    w, held = max(1, round(warmup * total_steps)), round(hold * total_steps)

    def factor(step):
        if step < held:
            return 0.0
        if step < w:
            return (step + 1) / w
        return 0.5 * (1 + math.cos(math.pi * min(1.0, (step - w) / max(1, total_steps - w))))

    return factor


def make_schedule(optimizer, total_steps: int, cfg: Config) -> torch.optim.lr_scheduler.LambdaLR:
    """Warm-up and cosine, stepped every batch; the spreads held for the first `spread_hold` of the steps."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, [warmup_cosine(total_steps, cfg.warmup,
                                                                        cfg.spread_hold if g["spread"] else 0.0)
                                                         for g in optimizer.param_groups])


def make_loss(model, cfg: Config):
    """Cross-entropy, the paper's loss. Ours, with --overlap: plus that weight times the heads'
    overlap summed over the layers (measures.head_overlap), so that heads attending alike pay."""
    if not cfg.overlap:
        return F.cross_entropy
    return lambda logits, labels: (F.cross_entropy(logits, labels)
                                   + cfg.overlap * sum(map(head_overlap, model.attention_layers)))


def autocast(device: torch.device, precision: str):
    """PyTorch's mixed precision: matrix products in bf16 or fp16 inside the block, the rest in
    fp32. In fp32 nothing changes."""
    return torch.autocast(device.type, dtype=DTYPES[precision]) if precision != "fp32" else contextlib.nullcontext()


def train_epoch(net, batches, loss_fn, optimizer, schedule, scaler, precision: str, sums: torch.Tensor,
                run: Run, stop: StopSignal) -> bool:
    """One epoch of A.4, from the batch where the run stands: forward, loss, backward, SGD step.

    Each batch adds its summed loss, correct predictions and images to `sums` [3], in place, so a
    stopped run saves the totals so far. Returns False when a stop signal ended the epoch early."""
    net.train()
    for images, labels in batches:  # [B, 3, 32, 32], [B]
        if stop.requested():  # Ctrl-C or SIGTERM, agreed by every process: stop before this step
            return False
        with autocast(images.device, precision):
            logits = net(images).float()  # [B, 10]
            loss = loss_fn(logits, labels)
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()  # fp16: the loss scaled up so that small gradients survive; else as is
        scaler.step(optimizer)  # fp16: gradients unscaled first, the step skipped if one overflowed
        scaler.update()
        schedule.step()
        n = len(labels)
        sums[:2] += torch.stack([loss.detach() * n, (logits.argmax(1) == labels).sum()]).double()
        sums[2] += n  # a number, not a tensor made on the host: no wait for the GPU
        run.step += 1  # batches done in this epoch: where a resume restarts
        if run.step % 50 == 0:  # every 50 steps, not every step: reading the loss waits for the GPU
            check_finite(sums[0], run)
        run.log_step(sums)  # progress on stderr; every --log-every steps the layers' measures to steps.jsonl
    return True


def check_finite(loss_sum: torch.Tensor, run: Run):
    """A loss that is no longer finite ends the run (TrainingError); the last checkpoint stays."""
    if not torch.isfinite(loss_sum):
        raise TrainingError(f"the training loss became {loss_sum.item()} in epoch {run.epoch + 1}; "
                            f"the last good checkpoint (epoch {run.epoch}) is kept in {run.out}")


def evaluate(net, batches, precision: str) -> torch.Tensor:
    """Summed cross-entropy, correct predictions and images over the test batches: [3]."""
    net.eval()
    totals = 0
    with torch.no_grad():
        for images, labels in batches:
            with autocast(images.device, precision):
                logits = net(images).float()
            totals = totals + torch.stack([F.cross_entropy(logits, labels, reduction="sum"),
                                           (logits.argmax(1) == labels).sum(),
                                           torch.tensor(len(labels), device=labels.device)]).double()
    return totals


def save_checkpoint(path, model, cfg: Config, run=None, optimizer=None, schedule=None, scaler=None, sums=None):
    """Everything --resume needs to continue exactly: weights, optimizer, schedule, gradient
    scaler, settings, the random number generators, and where the run stands (epoch, step, this
    epoch's sums, the epochs' records). Saved without an optimizer, it is a starting point (a
    pruned model) that --resume trains from epoch 0."""
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []
    atomic_save(dict(model=model.state_dict(), config=asdict(cfg), optimizer=optimizer and optimizer.state_dict(),
                     scheduler=schedule and schedule.state_dict(), scaler=scaler and scaler.state_dict(),
                     epoch=run.epoch if run else 0, step=run.step if run else 0,
                     partial=sums.tolist() + [run.seconds] if run else [], metrics=run.history if run else [],
                     rng=dict(torch=torch.get_rng_state(), cuda=cuda)), path)


def restore(checkpoint: dict, model, optimizer, schedule, scaler, sums: torch.Tensor, run: Run):
    """The state save_checkpoint saved, put back; a starting point restores the weights only."""
    model.load_state_dict(checkpoint["model"])
    if checkpoint["optimizer"] is None:
        return
    optimizer.load_state_dict(checkpoint["optimizer"])
    schedule.load_state_dict(checkpoint["scheduler"])
    scaler.load_state_dict(checkpoint["scaler"])
    torch.set_rng_state(checkpoint["rng"]["torch"])
    if torch.cuda.is_available() and checkpoint["rng"]["cuda"]:
        torch.cuda.set_rng_state_all(checkpoint["rng"]["cuda"])
    sums.copy_(torch.tensor(checkpoint["partial"][:3], dtype=torch.float64))
    run.epoch, run.step, run.history, run.seconds = (checkpoint["epoch"], checkpoint["step"], checkpoint["metrics"],
                                                     checkpoint["partial"][3])


def load_data(cfg: Config) -> tuple:
    """(training split, test split, mean, std): the run's training images (all, or its
    --subset), and the per-channel statistics that normalize every input."""
    train_set, test_set = data_lib.load(cfg.dataset, cfg.data_dir, cfg.seed)
    train_set = data_lib.training_subset(train_set, cfg.subset, cfg.seed)
    return (train_set, test_set) + data_lib.channel_stats(train_set.images)


def main(cfg: Config, model=None) -> dict:
    """A.4 from start to end: trains `model` (default: the one cfg describes) and returns the
    last epoch's metrics. `start` (below the line) settles the run's folder, its resume and its
    precision, and the processes of a multi-GPU run."""
    check_config(cfg)
    with start(cfg) as (cfg, checkpoint, reason, device, rank, world):
        if checkpoint and checkpoint["epoch"] >= cfg.epochs:  # a finished run: nothing to train
            return checkpoint["metrics"][-1]

        # data: shuffled batches with random crops of the 4-px padded image and flips (the authors' code),
        # made on the device; with several processes, each takes its share of every batch
        train_set, test_set, mean, std = load_data(cfg)
        shard = (rank, world)
        train_batches = data_lib.Batches(train_set, cfg.batch_size // world, mean, std, train=True, seed=cfg.seed,
                                         device=device, shard=shard)
        test_batches = data_lib.Batches(test_set, cfg.eval_batch_size, mean, std, train=False, seed=cfg.seed,
                                        device=device, shard=shard)
        if not len(train_batches):
            raise ValueError(f"--batch-size {cfg.batch_size}: larger than the {len(train_set.labels)} training images")

        # model, optimizer, schedule, and the gradient scaler fp16 needs
        torch.manual_seed(cfg.seed)  # the one seed: initialization and dropout (the data's randomness is keyed by it)
        # the fast layer: SelfAttention2d's equations in fewer operations (attention.py; the tests hold them equal)
        model = (model or model_from_config(asdict(cfg), FastSelfAttention2d)).to(device)
        optimizer = make_optimizer(model, cfg, device)
        schedule = make_schedule(optimizer, cfg.epochs * len(train_batches), cfg)
        scaler = torch.amp.GradScaler(device.type, enabled=cfg.precision == "fp16")
        loss_fn = make_loss(model, cfg)

        # resume: where the checkpoint stopped, bit for bit
        run = Run(Path(cfg.out), cfg, model, device, world, rank == 0, len(train_batches), reason)
        sums = torch.zeros(3, dtype=torch.float64, device=device)  # this epoch so far: loss sum, correct, images
        if checkpoint:
            restore(checkpoint, model, optimizer, schedule, scaler, sums, run)
        net = wrapped(model, cfg, world)  # several processes: DistributedDataParallel; --compile: fused kernels
        run.begin(optimizer, len(train_set.labels), len(test_set.labels))  # config.json, the logs, the first lines

        # A.4's loop: an epoch of SGD steps, then the test set and a checkpoint
        checkpoint_path = Path(cfg.out) / "checkpoint.pt"
        with StopSignal(device, world, rank == 0) as stop:  # Ctrl-C, SIGTERM: a flag read between batches
            for epoch in range(run.epoch, cfg.epochs):
                run.start_epoch()  # the epoch's clock
                batches = train_batches.epoch(epoch, run.step)  # from the batch where the run stands
                if not train_epoch(net, batches, loss_fn, optimizer, schedule, scaler, cfg.precision, sums, run, stop):
                    if rank == 0:  # stopped at a batch boundary: what is saved here resumes exactly
                        save_checkpoint(checkpoint_path, model, cfg, run, optimizer, schedule, scaler, sums)
                    run.stopped()
                    raise Stop(stop.signum)
                share_buffers(model, world)  # BatchNorm statistics: the first process's for all
                tested = (epoch + 1) % cfg.eval_every == 0 or epoch + 1 == cfg.epochs  # evaluated and saved
                test_sums = evaluate(net, test_batches.epoch(0), cfg.precision) if tested else sums.new_zeros(3)
                epoch_sums, test_sums = summed(sums.clone(), world), summed(test_sums, world)  # over the processes
                check_finite(epoch_sums[0], run)
                run.end_epoch(epoch_sums, test_sums, optimizer.param_groups[0]["lr"])  # metrics.jsonl, heads.jsonl
                sums.zero_()
                if rank == 0 and tested:
                    save_checkpoint(checkpoint_path, model, cfg, run, optimizer, schedule, scaler, sums)
        return run.finish()


# ---- the run's start, its processes, presets and the command line -----------------------------

@contextlib.contextmanager
def start(cfg: Config):
    """(cfg, checkpoint, reason, device, rank, world) for main: a new run's folder and precision,
    or a resumed run's own settings and checkpoint (None for a new run); `reason` says why the
    run computes in its precision. Inside the run's processes (runtime.processes: one, or those
    torchrun started)."""
    device = pick_device(cfg.device)
    with processes(device) as (rank, world):  # (0, 1) unless started by torchrun
        if cfg.resume:  # a resumed run continues with its own settings, in its own folder
            checkpoint, path = load_checkpoint(cfg.resume)
            if path.name != "checkpoint.pt":  # its folder would receive the logs of a run it does not hold
                raise ValueError(f"--resume {cfg.resume}: give a run folder (or its checkpoint.pt)")
            cfg = replace(Config(**checkpoint["config"]), resume=cfg.resume, device=cfg.device, out=str(path.parent))
            reason = f"{cfg.precision}: as the run started"
            if checkpoint["epoch"] >= cfg.epochs:
                print(f"{cfg.out} finished its {cfg.epochs} epoch{'s' * (cfg.epochs > 1)} (final test accuracy "
                      f"{checkpoint['metrics'][-1]['test_acc']:.4f}); nothing to do. To train longer, start a new "
                      "run: the schedule is fixed by --epochs.")
        else:
            checkpoint = None
            cfg = replace(cfg, out=str(output_folder(cfg.out, f"runs/{cfg.encoding}-{cfg.preset}")))
            precision, reason = decide_precision(cfg.precision, device, world)  # kept by the checkpoint
            cfg = replace(cfg, precision=precision)
        if cfg.batch_size % world:
            raise ValueError(f"--batch-size {cfg.batch_size} does not split over {world} processes")
        if device.type == "cuda" and cfg.precision == "fp32":
            torch.backends.cuda.matmul.allow_tf32 = True  # TF32 tensor cores, on Ampere and newer
        yield cfg, checkpoint, reason, device, rank, world


def wrapped(model: nn.Module, cfg: Config, world: int) -> nn.Module:
    """The model as the loop calls it: under DistributedDataParallel with several processes, and
    under torch.compile with --compile. Checkpoints save the model itself."""
    net = nn.parallel.DistributedDataParallel(model, broadcast_buffers=False) if world > 1 else model
    return compiled(net, cfg.compile) if cfg.compile else net


def share_buffers(model: nn.Module, world: int):
    """Every process takes the first one's buffers (BatchNorm's running statistics) before evaluating."""
    for buffer in model.buffers() if world > 1 else ():
        dist.broadcast(buffer, 0)


def summed(totals: torch.Tensor, world: int) -> torch.Tensor:
    """Totals summed over every process, in place; alone, as they are."""
    if world > 1:
        dist.all_reduce(totals)
    return totals



PRESETS = {
    "paper": {},  # Appendix A.4 and the authors' code: the defaults above
    # Both CPU presets differ from A.4 in: 2 layers of width 64 (FFN 128; ResNet18 of base
    # width 16) instead of 6 of 400, a few epochs instead of 300, and no attention dropout
    # (the factorized fast path needs it off).
    # tiny: a smoke run: 20,000 training images, 5 epochs.
    "tiny": dict(layers=2, dim=64, ffn_dim=128, width=16, subset=20000, epochs=5, attention_dropout=0.0),
    # laptop: what training with the paper's loss does to heads started at the paper's N(0, 2I),
    # on a CPU in minutes: all 50,000 training images, 3 epochs (1,500 steps instead of 150,000),
    # the heads' measures every 100 steps. Ours: lr 0.05, since at A.4's 0.1 this small model's
    # training loss stalled; positional parameters (centers and alpha) at 10x the learning rate
    # (their gradients are tiny next to the value weights'); warm-up 5% of its steps (75, not
    # A.4's 7,500). Not Fig. 2: the paper's figure is width 400 after 150,000 steps (README).
    "laptop": dict(layers=2, dim=64, ffn_dim=128, width=16, epochs=3, lr=0.05, position_lr=10.0,
                   attention_dropout=0.0, center_std=1.414, log_every=100),
}


# Settings that mean something for some models only; every other setting applies to all.
APPLIES = {name: ENCODINGS for name in ("layers", "heads", "dim", "ffn_dim", "dropout", "attention_dropout", "content",
                                         "position_lr")}
APPLIES |= {name: ("quadratic", "gaussian") for name in ("center_std", "grid_start", "spread_hold", "overlap")}
APPLIES |= {"min_alpha": ("quadratic",), "width": ("resnet18",)}


def applies(name: str, encoding: str) -> bool:
    return encoding in APPLIES.get(name, MODELS)


def parse_config(argv=None) -> Config:
    """Flags override the preset, the preset overrides the defaults. A flag that means nothing
    to the chosen model is refused; a preset's setting that means nothing to it is left at its
    default (and recorded, `not_applied`). With --resume a run keeps its own settings: only
    --device may be given too."""
    given = parse_flags(Config, __doc__, argv)
    if len(given.get("heads", ())) == 1:  # --heads 9: every layer's
        given["heads"] = given["heads"][0]
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
    if cfg.log_every < 0:
        raise ValueError(f"--log-every must be 0 (none) or a number of steps, got {cfg.log_every}")
    for name in ("epochs", "batch_size", "eval_batch_size", "eval_every", "layers", "dim", "ffn_dim", "width"):
        if getattr(cfg, name) < 1:
            raise ValueError(f"{flag(name)} must be at least 1, got {getattr(cfg, name)}")
    if cfg.compile == "reduce-overhead" and pick_device(cfg.device).type != "cuda":
        raise ValueError(f"--compile reduce-overhead replays CUDA graphs: it needs a CUDA device, and this run's is "
                         f"{pick_device(cfg.device)} (use --compile)")
    if cfg.overlap and cfg.content:
        raise ValueError("--overlap needs position-only heads; --content makes them depend on the image")
    heads = [cfg.heads] if isinstance(cfg.heads, int) else cfg.heads
    if any(h < 1 for h in heads):
        raise ValueError(f"--heads must be at least 1, got {cfg.heads}")
    if cfg.grid_start and any(math.isqrt(h) ** 2 != h for h in heads):
        raise ValueError(f"--grid-start places heads on a square kernel: --heads must be square numbers, got {cfg.heads}")
    if cfg.subset < 0:
        raise ValueError(f"--subset must be 0 (all images) or a number of images, got {cfg.subset}")
    for name, low, high in (("lr", 0, math.inf), ("position_lr", 0, math.inf), ("momentum", 0, 1),
                            ("weight_decay", 0, math.inf), ("min_alpha", 0, math.inf), ("warmup", 0, 1),
                            ("spread_hold", 0, 1), ("overlap", 0, math.inf), ("dropout", 0, 1), ("attention_dropout", 0, 1)):
        if not low <= getattr(cfg, name) <= high or (name.endswith("dropout") and getattr(cfg, name) == 1):
            raise ValueError(f"{flag(name)} must lie in [{low}, {high}{')' if name.endswith('dropout') else ']'}, "
                             f"got {getattr(cfg, name)}")


if __name__ == "__main__":
    command_line(lambda: main(parse_config()), (data_lib.DataError, TrainingError, FileNotFoundError, ValueError))
