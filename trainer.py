"""A run of train.py's recipe: what a long run needs around `train_epoch` and `evaluate`.

- a run directory: config.json (the flags, the data's name and checksum, what computed it),
  metrics.jsonl (a line an epoch, with each attention layer's measures), heads.jsonl (the
  heads per epoch, for Figs. 2 and 5), steps.jsonl (with --log-every N: the measures and heads
  every N steps and at step 0) and checkpoint.pt, rewritten atomically every epoch;
- resume: `--resume` continues where a run stopped, bit for bit; Ctrl-C or SIGTERM stops at
  the next batch boundary and saves there (a second Ctrl-C stops at once);
- progress on stderr, the run's precision decided once, several processes (torchrun, DDP).
"""
import json
import os
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

import torch
import torch.distributed as dist

import data as data_lib
from measures import layer_measures
from model import model_from_config
from records import (append_jsonl, atomic_save, checkpoint_dict, environment, head_snapshot, keep_lines,
                     load_checkpoint, step_record)
from runtime import Precision, Progress, Stop, StopSignal, TrainingError, choose_precision
from train import PRECISIONS, Config, check_config, evaluate, make_optimizer, make_schedule, not_applied, train_epoch


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
        self.optimizer = make_optimizer(self.model, cfg)
        total_steps = cfg.epochs * len(self.train_batches)
        self.schedule = make_schedule(self.optimizer, total_steps, cfg)
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
        for thing, key in ((self.optimizer, "optimizer"), (self.schedule, "scheduler")):
            (state,) = checkpoint[key] if isinstance(checkpoint[key], list) else [checkpoint[key]]
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
            checkpoint = checkpoint_dict(self.model, [self.optimizer], [self.schedule], self.cfg, self.epoch,
                                         self.step, partial, self.history)
            atomic_save(checkpoint | {"scaler": self.precision.scaler.state_dict()}, self.out / "checkpoint.pt")

    def start_logs(self, reason: str):
        """config.json, and the logs trimmed to the checkpoint's epoch (a resumed run rewrites the rest)."""
        self.out.mkdir(parents=True, exist_ok=True)
        record = asdict(self.cfg) | {"not_applied": not_applied(self.cfg), "data": self.data,
                                     "environment": environment(self.device) | {"precision": reason}}
        (self.out / "config.json").write_text(json.dumps(record, indent=1))
        keep_lines(self.out / "metrics.jsonl", self.epoch)
        keep_lines(self.out / "heads.jsonl", self.epoch)
        keep_lines(self.out / "steps.jsonl", self.global_step, key="step")
        if self.epoch == 0 and self.step == 0 and head_snapshot(self.model):
            append_jsonl(self.out / "heads.jsonl", {"epoch": 0, "layers": head_snapshot(self.model)})
        if self.global_step == 0 and self.cfg.log_every:
            append_jsonl(self.out / "steps.jsonl", step_record(self.model, 0, None))
        print(f"{self.cfg.encoding} on {self.cfg.dataset} ({self.sizes[0]} train / {self.sizes[1]} test images), "
              f"{sum(p.numel() for p in self.model.parameters()):,} parameters, {self.device}"
              f", {reason}, {self.world} process(es) -> {self.out}", flush=True)

    @property
    def global_step(self) -> int:
        return self.epoch * len(self.train_batches) + self.step

    def run_epoch(self, stop: StopSignal, progress: Progress):
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

        for loss, correct, n in train_epoch(self.net, batches(), self.optimizer, self.schedule, self.precision,
                                                 self.cfg.overlap):
            self.step += 1
            self.sums += torch.stack([loss * n, correct, torch.tensor(n, device=self.device)]).double()
            if self.step % 50 == 0 and not torch.isfinite(self.sums[0]):
                break
            if self.writer and self.cfg.log_every and self.global_step % self.cfg.log_every == 0:
                loss = self.sums[0].item() / self.sums[2].item()  # this epoch's so far
                append_jsonl(self.out / "steps.jsonl", step_record(self.model, self.global_step, loss))
            progress.step(time.time() - step_started, self.global_step,
                          lambda: f"loss {self.sums[0].item() / self.sums[2].item():.3f}")
        progress.end_epoch()
        self.seconds = time.time() - started

    def test(self) -> tuple:
        """(loss, accuracy) on the test set; with DDP each process takes its share of the images."""
        if self.world > 1:  # the replicas' buffers (BatchNorm statistics) as rank 0 holds them
            for buffer in self.model.buffers():
                dist.broadcast(buffer, 0)
        totals = evaluate(self.model, self.test_batches.epoch(0), self.precision)
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
        test_loss, test_acc = self.test()
        before = self.history[-1]["seconds"] if self.history else 0.0
        record = dict(epoch=self.epoch + 1, train_loss=sums[0].item() / sums[2].item(),
                      train_acc=sums[1].item() / sums[2].item(), test_loss=test_loss, test_acc=test_acc,
                      lr=self.optimizer.param_groups[0]["lr"], images_per_s=sums[2].item() / max(self.seconds, 1e-9),
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
                    self.run_epoch(stop, progress)
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
        if config.pop("position_optimizer", "sgd") != "sgd":
            raise ValueError(f"{path.parent} trained its positions with Adam, which train.py no longer offers")
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
