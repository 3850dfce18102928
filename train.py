"""Train on CIFAR-10 with the paper's recipe (section 4.1, Appendix A.4).

    python train.py --preset laptop                      # Fig. 2 learned on a CPU (README: what a laptop shows)
    python train.py --encoding quadratic                 # the paper's run: 300 epochs (a GPU)
    python train.py --preset tiny --encoding learned     # a smoke run
    python train.py --resume runs/quadratic-paper        # continue exactly where a run stopped
    torchrun --nproc_per_node=4 train.py ...             # DistributedDataParallel, one process a GPU

Read in this order: `Config` (A.4's recipe and the model), `make_optimizer`, `warmup_cosine`,
`train_epoch` (one epoch, the loop of pytorch/examples' mnist) and `evaluate`. The test set
is evaluated after every epoch; the final epoch's accuracy is the result. What a long run
needs besides (checkpoints, resume, logs, stop signals, progress, several processes) is in
trainer.py, which calls these an epoch at a time; the presets and the command line close
this file.
"""
import math
import sys
from dataclasses import dataclass

import torch
import torch.nn.functional as F

import data as data_lib
from attention import ENCODINGS
from flags import option, parse_flags
from measures import head_overlap
from model import MODELS
from runtime import Precision, Stop, TrainingError, keep_freed_memory

PRECISIONS = ("fp32", "bf16", "fp16")


@dataclass
class Config:
    # the data and A.4's recipe
    dataset: str = option("cifar10", "CIFAR-10, or tiled motifs made in memory", choices=["cifar10", "synthetic"])
    data_dir: str = option("data", "folder with (or to receive) CIFAR-10")
    subset: int = option(0, "train on this many training images (0: all)")
    epochs: int = option(300, "training epochs")
    batch_size: int = option(100, "images a step, across all processes")
    lr: float = option(0.1, "peak learning rate of SGD")
    momentum: float = option(0.9, "SGD momentum")
    weight_decay: float = option(1e-4, "SGD weight decay (the authors' code: none on Gaussian centers and spreads)")
    warmup: float = option(0.05, "fraction of steps of linear warm-up (the authors' code)")
    dropout: float = option(0.1, "dropout probability")
    # the model (section 4.1)
    encoding: str = option("quadratic", "a SelfAttentionNet encoding, or resnet18", choices=MODELS)
    content: bool = option(False, "add the content term of eq. 8 to the attention logits")
    layers: int = option(6, "attention blocks")
    heads: object = option(9, "one number, or one per layer (pruned models)", type=int)
    dim: int = option(400, "hidden dimension (every head's D_h too)")
    ffn_dim: int = option(512, "feed-forward inner dimension")
    attention_dropout: float = option(0.1, "dropout on the attention probabilities, one mask a step for "
                                           "the whole batch (the authors' code); 0 allows the factorized fast path")
    center_std: float = option(2.0, "standard deviation of the initial head centers (the authors' code: 2; "
                                    "the paper writes N(0, 2I), i.e. 1.41)")
    width: int = option(64, "ResNet18 base width")
    # ours, for short runs on a CPU (A.4 has none of them)
    position_lr: float = option(1.0, "learning-rate multiplier of the positional parameters (A.4: 1)")
    spread_hold: float = option(0.0, "fraction of the steps during which every head's spread (quadratic alpha, "
                                     "gaussian Sigma^-1) keeps its start while the centers move (A.4: 0)")
    grid_start: bool = option(False, "start head h at the h-th shift of the 3x3 kernel plus its draw "
                                     "(ConViT's local init; A.4: no)")
    min_alpha: float = option(0.0, "floor of a quadratic head's alpha (A.4: 0): it cannot widen past it")
    overlap: float = option(0.0, "weight in the loss of the heads' overlap, measures.head_overlap (A.4: 0)")
    # the run
    preset: str = option("paper", "defaults for every flag not given: paper (A.4), tiny (a smoke run) "
                                  "or laptop (Fig. 2 on a CPU)", choices=["paper", "tiny", "laptop"])
    eval_batch_size: int = option(500, "images a test batch")
    log_every: int = option(0, "every this many steps (and at step 0), the layers' measures and heads to "
                               "steps.jsonl (0: none)")
    out: str = option("", "run directory (default runs/ENCODING-PRESET)")
    resume: str = option("", "run directory (or checkpoint) to continue")
    seed: int = option(0, "the one seed of the run")
    device: str = option("auto", "auto: cuda, then mps, then cpu")
    compile: bool = option(False, "torch.compile the model")
    precision: str = option("auto", "matrix products in fp32, or autocast to bf16, or to fp16 with a gradient "
                                    "scaler; auto: what the hardware computes natively (CUDA capability >= 8.0: "
                                    "bf16; below: fp16; a CPU: bf16 where it measures 1.5x fp32)",
                            choices=("auto",) + PRECISIONS)


def make_optimizer(model, cfg: Config) -> torch.optim.SGD:
    """SGD of A.4. As in the authors' code, a Gaussian head's center and spread (quadratic,
    gaussian) are not weight-decayed; learned tables and head keys are. Every positional
    parameter (all of an encoding's) takes `position_lr` times the learning rate; the spreads
    (alpha, Sigma^-1) have groups of their own, which `warmup_cosine` can hold still."""
    undecayed = {id(getattr(m, name)) for m in model.modules() for name in getattr(m, "undecayed", ())}
    spreads = {id(getattr(m, name)) for m in model.modules() for name in getattr(m, "spread", ())}
    groups = {}  # (positional, decayed, spread) -> parameters
    for name, p in model.named_parameters():
        groups.setdefault((".encoding." in name, id(p) not in undecayed, id(p) in spreads), []).append(p)
    return torch.optim.SGD([dict(params=params, spread=spread, lr=cfg.lr * (cfg.position_lr if positional else 1.0),
                                 weight_decay=cfg.weight_decay if decayed else 0.0)
                            for (positional, decayed, spread), params in sorted(groups.items())],
                           lr=cfg.lr, momentum=cfg.momentum)


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


def make_schedule(optimizer, total_steps: int, cfg: Config) -> torch.optim.lr_scheduler.LambdaLR:
    """Warm-up and cosine, stepped every batch; the spreads held for the first `spread_hold` of the steps."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, [warmup_cosine(total_steps, cfg.warmup, cfg.spread_hold * g["spread"])
                                                         for g in optimizer.param_groups])


def train_epoch(model, batches, optimizer, schedule, precision: Precision, overlap: float = 0.0):
    """One epoch of A.4, a batch at a time: forward, cross-entropy, backward, an SGD step, the
    schedule's step. Yields each batch's loss, correct predictions and size."""
    model.train()
    for images, labels in batches:
        with precision.autocast():  # fp32: does nothing
            logits = model(images).float()
        loss = F.cross_entropy(logits, labels)
        if overlap:  # ours, not the paper's: heads that attend to the same pixels pay for it
            loss = loss + overlap * sum(map(head_overlap, getattr(model, "module", model).attention_layers))
        optimizer.zero_grad(set_to_none=True)
        precision.scaler.scale(loss).backward()  # fp16 scales the loss; otherwise loss.backward()
        precision.scaler.step(optimizer)  # otherwise optimizer.step()
        precision.scaler.update()
        schedule.step()
        yield loss.detach(), (logits.argmax(1) == labels).sum(), len(labels)


def evaluate(model, batches, precision: Precision) -> torch.Tensor:
    """Summed cross-entropy, correct predictions and images over the test batches: [3]."""
    model.eval()
    totals = 0
    with torch.no_grad(), precision.autocast():
        for images, labels in batches:
            logits = model(images).float()
            totals = totals + torch.stack([F.cross_entropy(logits, labels, reduction="sum"),
                                           (logits.argmax(1) == labels).sum(),
                                           torch.tensor(len(labels), device=labels.device)]).double()
    return totals


def run(cfg: Config, model=None) -> dict:
    """Train `model` (or a new one from cfg) as cfg says; returns the last epoch's metrics.
    trainer.py runs train_epoch and evaluate an epoch at a time, with checkpoints and logs."""
    import trainer  # here, not above: trainer.py imports this file

    return trainer.run(cfg, model)


# ---- presets and the command line --------------------------------------------------------

PRESETS = {
    "paper": {},  # Appendix A.4 and the authors' code: the defaults above
    # Both CPU presets differ from A.4 in: 2 layers of width 64 (FFN 128; ResNet18 of base
    # width 16) instead of 6 of 400, a few epochs instead of 300, and no attention dropout
    # (the factorized fast path needs it off).
    # tiny: a smoke run: 20,000 training images, 5 epochs.
    "tiny": dict(layers=2, dim=64, ffn_dim=128, width=16, subset=20000, epochs=5, attention_dropout=0.0),
    # laptop: Fig. 2 learned on a CPU: all 50,000 training images, 3 epochs (1,500 steps instead
    # of 150,000), from the paper's start, centers N(0, 2I). Ours: lr 0.05, since at A.4's 0.1
    # this small model's training loss climbed; positional parameters at 10x the learning rate
    # (their gradients are tiny next to the value weights'); and the heads' overlap in the
    # loss at 0.1, without which heads that start together stay together (README section 7).
    # The earlier preset placed the heads instead: --grid-start --center-std 0.5 --min-alpha 1.
    "laptop": dict(layers=2, dim=64, ffn_dim=128, width=16, epochs=3, lr=0.05, position_lr=10.0,
                   attention_dropout=0.0, center_std=1.414, overlap=0.1),
}


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


# Settings that mean something for some models only; every other setting applies to all.
APPLIES = {name: ENCODINGS for name in ("layers", "heads", "dim", "ffn_dim", "dropout", "attention_dropout", "content",
                                         "position_lr")}
APPLIES |= {name: ("quadratic", "gaussian") for name in ("center_std", "grid_start", "spread_hold", "overlap")}
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
    if cfg.log_every < 0:
        raise ValueError(f"--log-every must be 0 (none) or a number of steps, got {cfg.log_every}")
    for name in ("epochs", "batch_size", "eval_batch_size", "layers", "dim", "ffn_dim", "width"):
        if getattr(cfg, name) < 1:
            raise ValueError(f"{flag(name)} must be at least 1, got {getattr(cfg, name)}")
    if cfg.overlap and cfg.content:
        raise ValueError("--overlap needs position-only heads; --content makes them depend on the image")
    heads = [cfg.heads] if isinstance(cfg.heads, int) else cfg.heads
    if any(h < 1 for h in heads):
        raise ValueError(f"--heads must be at least 1, got {cfg.heads}")
    if cfg.subset < 0:
        raise ValueError(f"--subset must be 0 (all images) or a number of images, got {cfg.subset}")
    for name, low, high in (("lr", 0, math.inf), ("position_lr", 0, math.inf), ("momentum", 0, 1),
                            ("weight_decay", 0, math.inf), ("warmup", 0, 1), ("spread_hold", 0, 1), ("overlap", 0, math.inf), ("dropout", 0, 1),
                            ("attention_dropout", 0, 1)):
        if not low <= getattr(cfg, name) <= high or (name.endswith("dropout") and getattr(cfg, name) == 1):
            raise ValueError(f"{flag(name)} must lie in [{low}, {high}{')' if name.endswith('dropout') else ']'}, "
                             f"got {getattr(cfg, name)}")




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
