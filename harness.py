"""The harness around train.py's recipe: what a long run needs that the paper does not.

`train.main` opens a `Run` and reads nine of its parts: `cfg` (a resumed run's own
settings), `device`, `batches`, `start` (the network to train), `epoch` (where a resumed run
stands), `steps` (the epoch's batches), `sums` (the epoch's running loss, correct and images,
which `train_epoch` adds to and `steps` reads between batches: the progress line, the NaN
check, the save on Ctrl-C), `end_epoch` and `finish`. None of them changes a step. Behind
them:
- a run directory: config.json (the flags, the data's name and checksum, what computed it),
  metrics.jsonl (a line an epoch, with each attention layer's measures), heads.jsonl (the
  heads per epoch, for Figs. 2 and 5), steps.jsonl (with --log-every N: the measures and heads
  every N steps and at step 0) and checkpoint.pt, rewritten atomically every epoch;
- resume: `--resume` continues where a run stopped, bit for bit; Ctrl-C or SIGTERM stops at
  the next batch boundary and saves there (a second Ctrl-C stops at once);
- the device, the run's precision decided once (autocast around the network), progress on
  stderr, several processes (torchrun, DDP).
"""
import json
import os
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

import data as data_lib
from measures import layer_measures
from records import (append_jsonl, atomic_save, checkpoint_dict, environment, head_snapshot, keep_lines,
                     load_checkpoint, step_record)
from runtime import PRECISIONS, Precision, Progress, Stop, StopSignal, TrainingError, choose_precision


def pick_device(name: str, flag: str = "--device") -> torch.device:
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ValueError(f"{flag} {name}: not a device name (auto, cpu, cuda, cuda:1, mps)") from None
    available = dict(cuda=torch.cuda.is_available(), mps=torch.backends.mps.is_available()).get(device.type, True)
    if not available:
        raise ValueError(f"{flag} {name}: this machine has no {device.type.upper()} device; use {flag} cpu or auto")
    return device


class Autocast(nn.Module):
    """The network in the run's precision: its forward under autocast, its logits in fp32."""

    def __init__(self, net: nn.Module, precision: Precision):
        super().__init__()
        self.net, self.precision = net, precision

    def forward(self, images):
        with self.precision.autocast():  # fp32: does nothing
            return self.precision.scale_gradient(self.net(images).float())  # (fp16's scaler: runtime.Precision)


class Run:
    """One run of train.main: a context manager that sets the run up (device, processes,
    precision, resume, stop signals) and says how it ended."""

    def __init__(self, cfg):
        self.rank, self.world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
        self.writer = self.rank == 0
        self.device = pick_device(cfg.device)
        self.cfg = cfg
        self.epoch, self.step, self.history, self.seconds = 0, 0, [], 0.0

    def __enter__(self):
        if self.world > 1 and not dist.is_initialized():
            dist.init_process_group("nccl" if self.device.type == "cuda" else "gloo")
        try:
            self.cfg, self.checkpoint, self.reason = settle(self.cfg, self.device, self.world)
            if self.cfg.precision == "fp16" and self.cfg.overlap:  # fp16's scaler reaches the loss through the logits
                raise ValueError("--overlap cannot run in fp16: choose --precision bf16 or fp32")
        except BaseException:
            self.__exit__(*sys.exc_info())
            raise
        self.out = run_directory(self.cfg)
        self.precision = Precision(self.cfg.precision, self.device)
        self.sums = torch.zeros(3, dtype=torch.float64, device=self.device)  # this epoch: loss sum, correct, seen
        self.signals = StopSignal(self.device, self.world, self.writer).__enter__()
        return self

    def __exit__(self, kind, error, traceback):
        if hasattr(self, "signals"):
            self.signals.__exit__(kind, error, traceback)
        if self.writer and isinstance(error, Stop):
            print(f"stopped in epoch {self.epoch + 1} after {self.step} batches; saved. Continue with: "
                  f"python train.py --resume {self.out}", file=sys.stderr)
        elif self.writer and isinstance(error, KeyboardInterrupt):
            print(f"stopped without saving; {self.out / 'checkpoint.pt'} holds the last save", file=sys.stderr)
        if self.world > 1 and dist.is_initialized():
            dist.destroy_process_group()

    def batches(self, split, batch_size: int, mean, std, train: bool) -> data_lib.Batches:
        """The split's batches on the run's device: shuffled and augmented for training. A
        training batch of `batch_size` images is shared by the processes; with several, each
        evaluates its share of the test images in batches of `batch_size`."""
        per_rank = batch_size // self.world if train else batch_size
        batches = data_lib.Batches(split, per_rank, mean, std, train, self.cfg.seed, self.device, (self.rank, self.world))
        if train and not len(batches):
            raise ValueError(f"--batch-size {batch_size}: larger than the {len(split.labels)} training images")
        setattr(self, "train_images" if train else "test_images", len(split.labels))
        return batches

    def start(self, model, optimizer, schedule, steps_per_epoch: int) -> nn.Module:
        """The network to train: the model restored from the run's checkpoint, in its precision
        (Autocast), replicated across processes (DDP); the logs begun."""
        self.model, self.optimizer, self.schedule, self.steps_per_epoch = model, optimizer, schedule, steps_per_epoch
        if self.checkpoint:
            self.restore(self.checkpoint)
        self.precision.attach(optimizer)
        net = nn.parallel.DistributedDataParallel(model, broadcast_buffers=False) if self.world > 1 else model
        net = torch.compile(net) if self.cfg.compile else net
        eval_share = self.test_images / (3 * self.train_images)  # a test image: a forward, a third of a step's work
        self.progress = Progress(steps_per_epoch, self.cfg.epochs * steps_per_epoch, self.cfg.batch_size, self.device,
                                 self.writer, eval_share)
        if self.epoch >= self.cfg.epochs:
            print(f"{self.out} finished its {self.cfg.epochs} epoch{'s' * (self.cfg.epochs > 1)} (final test accuracy "
                  f"{self.history[-1]['test_acc']:.4f}); nothing to do. To train longer, start a new run: the "
                  "schedule is fixed by --epochs.")
        elif self.writer:
            self.start_logs()
        return Autocast(net, self.precision)

    def restore(self, checkpoint: dict):
        self.model.load_state_dict(checkpoint["model"])
        if not checkpoint["optimizer"]:  # a starting point (a pruned model): train it from epoch 0
            return
        for thing, key in ((self.optimizer, "optimizer"), (self.schedule, "scheduler")):
            (state,) = checkpoint[key] if isinstance(checkpoint[key], list) else [checkpoint[key]]
            thing.load_state_dict(state)
        torch.set_rng_state(checkpoint["rng"]["torch"])
        if self.device.type == "cuda" and checkpoint["rng"]["cuda"]:
            torch.cuda.set_rng_state_all(checkpoint["rng"]["cuda"])
        self.epoch, self.step, self.history = checkpoint["epoch"], checkpoint["step"], checkpoint["metrics"]
        self.sums.copy_(torch.tensor(checkpoint["partial"][:3], dtype=torch.float64))
        self.seconds = checkpoint["partial"][3]
        if checkpoint.get("scaler"):
            self.precision.scaler.load_state_dict(checkpoint["scaler"])

    def save(self):
        if self.writer:
            partial = self.sums.tolist() + [self.seconds]
            checkpoint = checkpoint_dict(self.model, [self.optimizer], [self.schedule], self.cfg, self.epoch,
                                         self.step, partial, self.history)
            atomic_save(checkpoint | {"scaler": self.precision.scaler.state_dict()}, self.out / "checkpoint.pt")

    @property
    def global_step(self) -> int:
        return self.epoch * self.steps_per_epoch + self.step

    def start_logs(self):
        """config.json, and the logs trimmed to the checkpoint (a resumed run rewrites the rest)."""
        self.out.mkdir(parents=True, exist_ok=True)
        data = data_lib.identity(self.cfg.dataset, self.cfg.data_dir, self.cfg.seed)  # what the run read
        record = asdict(self.cfg) | {"not_applied": self.cfg.not_applied(), "data": data,
                                     "environment": environment(self.device) | {"precision": self.reason}}
        if self.global_step:  # resumed: what computed each earlier part, with the step it stopped at
            before = json.loads((self.out / "config.json").read_text())
            parts = before.get("earlier_parts", [])
            if not parts or parts[-1]["until_step"] < self.global_step:  # a part that made no step is left out
                parts = parts + [before["environment"] | {"until_step": self.global_step}]
            record["earlier_parts"] = parts
        (self.out / "config.json").write_text(json.dumps(record, indent=1))
        keep_lines(self.out / "metrics.jsonl", self.epoch)
        keep_lines(self.out / "heads.jsonl", self.epoch)
        keep_lines(self.out / "steps.jsonl", self.global_step, key="step")
        if self.global_step == 0 and head_snapshot(self.model):
            append_jsonl(self.out / "heads.jsonl", {"epoch": 0, "layers": head_snapshot(self.model)})
        if self.global_step == 0 and self.cfg.log_every:
            append_jsonl(self.out / "steps.jsonl", step_record(self.model, 0, None))
        print(f"{self.cfg.encoding} on {self.cfg.dataset} ({self.train_images} train / {self.test_images} test images), "
              f"{sum(p.numel() for p in self.model.parameters()):,} parameters, {self.device}"
              f", {self.reason}, {self.world} process(es) -> {self.out}", flush=True)
        print("SGD groups: " + "; ".join(f"{sum(p.numel() for p in g['params']):,} parameters at lr {g['initial_lr']:g}, "
                                         f"weight decay {g['weight_decay']:g}" + (" (the spreads)" if g["spread"] else "")
                                         for g in self.optimizer.param_groups), flush=True)

    def steps(self, batches: data_lib.Batches, epoch: int):
        """The epoch's training batches, from where a resumed run stopped. Between two steps,
        the step's bookkeeping (count, progress, a finite loss, steps.jsonl); before a batch, a
        stop request answered with a checkpoint at this boundary."""
        assert epoch == self.epoch, f"epoch {epoch} asked, the run stands at epoch {self.epoch}"
        self.epoch_started = time.time() - self.seconds
        step_started = None
        for batch in batches.epoch(epoch, self.step):
            if step_started is not None:
                self.after_step(time.time() - step_started)
            signum = self.signals.requested()
            if signum:  # a batch boundary: what is saved here resumes exactly
                self.seconds = time.time() - self.epoch_started
                self.save()
                raise Stop(signum)
            step_started = time.time()
            yield batch
        if step_started is not None:
            self.after_step(time.time() - step_started)
        self.progress.end_epoch()
        self.seconds = time.time() - self.epoch_started
        for buffer in self.model.buffers() if self.world > 1 else ():  # BatchNorm statistics as rank 0 holds them
            dist.broadcast(buffer, 0)

    def after_step(self, seconds: float):
        self.step += 1
        if self.step % 50 == 0 and not torch.isfinite(self.sums[0]):
            raise TrainingError(f"the training loss became {self.sums[0].item()} in epoch {self.epoch + 1}; "
                                f"the last good checkpoint (epoch {self.epoch}) is kept in {self.out}")
        if self.writer and self.cfg.log_every and self.global_step % self.cfg.log_every == 0:
            loss = self.sums[0].item() / self.sums[2].item()  # this epoch's so far
            append_jsonl(self.out / "steps.jsonl", step_record(self.model, self.global_step, loss))
        self.progress.step(seconds, self.global_step, lambda: f"loss {self.sums[0].item() / self.sums[2].item():.3f}")

    def end_epoch(self, train_sums: torch.Tensor, test_sums: torch.Tensor) -> dict:
        """Log and checkpoint a trained and evaluated epoch (sums: loss, correct, images); its
        record (seconds count evaluation)."""
        sums = train_sums.clone()
        if self.world > 1:
            dist.all_reduce(sums)
            dist.all_reduce(test_sums)
        if not torch.isfinite(sums[0]):
            raise TrainingError(f"the training loss became {sums[0].item()} in epoch {self.epoch + 1}; "
                                f"the last good checkpoint (epoch {self.epoch}) is kept in {self.out}")
        before = self.history[-1]["seconds"] if self.history else 0.0
        record = dict(epoch=self.epoch + 1, train_loss=sums[0].item() / sums[2].item(),
                      train_acc=sums[1].item() / sums[2].item(), test_loss=(test_sums[0] / test_sums[2]).item(),
                      test_acc=(test_sums[1] / test_sums[2]).item(), lr=self.optimizer.param_groups[0]["lr"],
                      images_per_s=sums[2].item() / max(self.seconds, 1e-9),
                      seconds=before + time.time() - self.epoch_started)
        record["best_test_acc"] = max([record["test_acc"]] + [m["test_acc"] for m in self.history])
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
        self.print_epoch(record)
        return record

    def print_epoch(self, r: dict):
        if self.writer:
            eta = (self.cfg.epochs - r["epoch"]) * r["seconds"] / r["epoch"]
            print(f"epoch {r['epoch']:>3}/{self.cfg.epochs}  train loss {r['train_loss']:.3f} acc {r['train_acc']:.3f}  "
                  f"test loss {r['test_loss']:.3f} acc {r['test_acc']:.3f}  lr {r['lr']:.4f}  "
                  f"{r['images_per_s']:.0f} img/s  {r['seconds']:.0f}s  ETA {eta / 60:.1f} min", flush=True)

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


def run_directory(cfg) -> Path:
    return Path(cfg.out or f"runs/{cfg.encoding}-{cfg.preset}")


def settle(cfg, device, world: int) -> tuple:
    """The run's final config (a resumed run's own, precision decided), checkpoint (or None)
    and why it computes in that precision."""
    if cfg.resume:
        checkpoint, path = load_checkpoint(cfg.resume)
        config = dict(checkpoint["config"])
        if "bf16" in config:  # recorded before --precision
            config["precision"] = "bf16" if config.pop("bf16") else "fp32"
        if config.pop("position_optimizer", "sgd") != "sgd":
            raise ValueError(f"{path.parent} trained its positions with Adam, which train.py no longer offers")
        cfg = type(cfg)(**(config | dict(resume=cfg.resume, device=cfg.device, out=str(path.parent))))
        return cfg, checkpoint, f"{cfg.precision}: as the run started"
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
