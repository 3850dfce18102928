"""The GPU lease's first minutes: train.py's training step timed in each way it can run.

    python -m lab.lease --modes eager,default,reduce-overhead --json modes.json   # as lab/gpu.sh runs it

The modes: eager, compiled (default), and compiled as CUDA graphs (reduce-overhead; CUDA only).
The step is train.train_epoch's, at the flags of --train-flags (default A.4's: width 400, batch
100, attention dropout 0.1, the precision auto picks). Every mode starts from the run's seed and
trains on the same batches. Its first steps compile; the steps after them are timed in windows
between synchronizations: ms a step (the median window) and images/s.

A mode agrees when each step's loss is within a share of eager's (AGREE). Compiled modes draw
eager's dropout masks (runtime.compiled), so only round-off separates them. lab/gpu.sh trains
in the fastest mode that agrees. A mode that fails is reported, and the others still run.
"""
import itertools
import json
import shlex
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

import data as data_lib
import train
from attention import FastSelfAttention2d
from lab.bench import sync
from model import model_from_config
from records import environment
from runtime import StopSignal, command_line, compiled, decide_precision, option, parse_flags, pick_device

WARMUP_STEPS, WINDOW = 5, 10  # untimed steps (compilation, CUDA graphs' recording); steps a timed window
# A mode agrees when every step's loss is within this share of eager's. In fp32 only round-off differs.
# In bf16 and fp16 each product rounds its operands to 8 or 11 bits (by up to 0.4% or 0.05%), and compiled
# kernels round at other places than eager's. On 2 cores of an Intel Xeon with AMX, compiled against eager:
# 2.4e-7 in fp32 (1 layer of width 16, 15 steps), 4.1e-4 in bf16 (2 layers of width 32, 25 steps).
AGREE = {"fp32": 1e-4, "bf16": 2e-2, "fp16": 2e-2}


@dataclass
class Config:
    modes: str = option("eager,default,reduce-overhead", "comma-separated, eager first: eager, default, "
                                                          "reduce-overhead")
    train_flags: str = option("", "train.py's flags, as one string (default: A.4's run)")
    steps: int = option(40, f"steps timed in each mode, in windows of {WINDOW}, after {WARMUP_STEPS} of "
                            "warm-up (compilation)")
    json: str = option("", "also write the results to this file")


class StepLog:
    """train.train_epoch's `run` here: the loss of every step, and the seconds of every step
    of the warm-up (each synchronized) and of every window of WINDOW steps after it."""

    def __init__(self, device):
        self.device, self.epoch, self.step, self.out = device, 0, 0, Path("lease")
        self.sums, self.seconds, self.start = [], [], time.perf_counter()

    def log_step(self, sums: torch.Tensor):
        self.sums.append(sums[0].clone())  # the running loss sum, read once the steps are done
        if self.step <= WARMUP_STEPS or (self.step - WARMUP_STEPS) % WINDOW == 0:
            sync(self.device)
            now = time.perf_counter()
            self.seconds.append(now - self.start)
            self.start = now


def time_modes(cfg: Config) -> dict:
    """train.py's step at cfg.train_flags in each of cfg.modes (the module's docstring)."""
    modes = cfg.modes.split(",")
    if modes[0] != "eager" or not set(modes) <= {"eager", "default", "reduce-overhead"}:
        raise ValueError(f"--modes {cfg.modes}: eager first (the reference), then default or reduce-overhead")
    run = train.parse_config(shlex.split(cfg.train_flags))
    train.check_config(run)
    device = pick_device(run.device)
    precision = decide_precision(run.precision, device, 1)[0]
    torch.backends.cuda.matmul.allow_tf32 = True  # as train.py computes fp32 on a GPU
    train_set, _, mean, std = train.load_data(run)
    batches = data_lib.Batches(train_set, run.batch_size, mean, std, train=True, seed=run.seed, device=device)
    steps = WARMUP_STEPS + cfg.steps
    if cfg.steps < WINDOW or cfg.steps % WINDOW or len(batches) < steps:
        raise ValueError(f"--steps {cfg.steps}: a multiple of {WINDOW}, at most an epoch's {len(batches)} less "
                         f"{WARMUP_STEPS} of warm-up")
    rows = []
    for mode in modes:
        row = dict(mode=mode, device=str(device), precision=precision, batch=run.batch_size, dim=run.dim)
        rows.append(row)
        if mode == "reduce-overhead" and device.type != "cuda":
            row["error"] = "CUDA graphs need a CUDA device"
            continue
        torch.manual_seed(run.seed)  # the run's start, as train.py seeds it
        model = model_from_config(asdict(run), FastSelfAttention2d).to(device)
        net = model
        if mode != "eager":
            torch._dynamo.reset()  # compiled afresh (the caches on disk kept)
            net = compiled(model, mode)
        optimizer = train.make_optimizer(model, run, device)
        schedule = train.make_schedule(optimizer, run.epochs * len(batches), run)
        scaler = torch.amp.GradScaler(device.type, enabled=precision == "fp16")
        log, sums = StepLog(device), torch.zeros(3, dtype=torch.float64, device=device)
        try:
            train.train_epoch(net, itertools.islice(batches.epoch(0), steps), train.make_loss(model, run), optimizer,
                              schedule, scaler, precision, sums, log, StopSignal(device, 1, False))
        except Exception as e:  # a compiled mode that fails to compile or run costs the others nothing
            if mode == "eager":
                raise
            row["error"] = f"{type(e).__name__}: {e}".splitlines()[0][:300]
            continue
        running = torch.stack(log.sums).tolist()
        losses = [(b - a) / run.batch_size for a, b in zip([0.0] + running, running)]
        windows = [s / WINDOW for s in log.seconds[WARMUP_STEPS:]]
        row |= dict(losses=losses, warmup_step_s=log.seconds[:WARMUP_STEPS], window_step_s=windows,
                    step_s=statistics.median(windows), images_per_s=run.batch_size / statistics.median(windows))
        row["loss_difference"] = max(abs(a - b) / abs(b) for a, b in zip(losses, rows[0]["losses"]))  # eager's
        row["agrees"] = row["loss_difference"] <= AGREE[precision]
    fastest = min((r for r in rows if r.get("agrees")), key=lambda r: r["step_s"])
    return dict(train_config=asdict(run), environment=environment(device), agree=AGREE[precision], rows=rows,
                fastest=fastest["mode"], fastest_epoch_s=fastest["step_s"] * len(batches))


def print_modes(result: dict):
    rows, env = result["rows"], result["environment"]
    first = rows[0]
    print(f"\ntrain.py's step on {env['device']} ({env['hardware']}), {first['precision']}, batch {first['batch']}, "
          f"width {first['dim']}: {WARMUP_STEPS} steps of warm-up, then {len(first['losses']) - WARMUP_STEPS} timed")
    print(f"{'mode':<17}{'warm-up s':>10}{'ms a step':>11}{'images/s':>10}{'loss vs eager':>15}  agrees (within "
          f"{result['agree']:.0e})")
    for r in rows:
        if "error" in r:
            print(f"{r['mode']:<17}not run: {r['error']}")
        else:
            print(f"{r['mode']:<17}{sum(r['warmup_step_s']):>10.1f}{r['step_s'] * 1e3:>11.2f}{r['images_per_s']:>10.0f}"
                  f"{r['loss_difference']:>15.1e}  {'yes' if r['agrees'] else 'NO'}")
    print(f"fastest that agrees: {result['fastest']}, {result['fastest_epoch_s']:.1f} s an epoch of training")


def main():
    cfg = Config(**parse_flags(Config, __doc__))
    result = time_modes(cfg)
    if cfg.json:
        Path(cfg.json).write_text(json.dumps(dict(config=asdict(cfg)) | result, indent=1))
    print_modes(result)


if __name__ == "__main__":
    command_line(main, (ValueError,))
