"""The machinery around the scripts, none of which changes what the paper computes.

- the command line: every script's Config dataclass becomes its flags (`option`,
  `parse_flags`), `output_folder` is where it writes (never into a run's folder), and
  `command_line` ends a script with one line and an exit code;
- the device (cuda, then mps, then cpu) and the precision it computes natively (bf16, fp16
  with a gradient scaler, fp32), decided once per run; torch.compile, with eager's dropout;
- progress: images/s and the run's remaining time on stderr;
- stop signals: Ctrl-C and SIGTERM only set a flag that train.py reads between batches
  (and TrainingError, for a run that cannot go on);
- the process: glibc keeps freed blocks for the next step, and subnormal floats count as
  zero; torchrun's process group, and a multi-process run's exit without C++'s teardown.
"""
import argparse
import contextlib
import ctypes
import dataclasses
import os
import signal
import sys
import threading
import time
from pathlib import Path

import torch
import torch.distributed as dist


# ---- the command line ---------------------------------------------------------------------

def option(default, help: str, **flag):
    """A Config field with its help text; `flag` holds more argparse settings (type, nargs, choices)."""
    if isinstance(default, list):
        return dataclasses.field(default_factory=lambda: list(default), metadata=dict(help=help, **flag))
    return dataclasses.field(default=default, metadata=dict(help=help, **flag))


def parse_flags(config_class, doc: str, argv=None, positional=()) -> dict:
    """The values given on the command line, by field name ({"epochs": 3} for `--epochs 3`; flags
    not given are absent). Every field of the dataclass is a flag `--field-name` (booleans also
    `--no-field-name`), those in `positional` arguments. Only a flag's full name is taken: argparse
    would read a misspelling that begins a real flag (`--epoch`) as that flag (`--epochs`)."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     argument_default=argparse.SUPPRESS, allow_abbrev=False)
    for f in dataclasses.fields(config_class):
        spec = dict(f.metadata)
        default = f.default_factory() if f.default is dataclasses.MISSING else f.default
        if f.name not in positional and default not in ("", None, []) and "(default" not in spec["help"]:
            spec["help"] += f" (default {default})"
        if f.type is bool:
            spec["action"] = argparse.BooleanOptionalAction
        elif "type" not in spec and not isinstance(default, list):
            spec["type"] = f.type
        parser.add_argument(f.name if f.name in positional else flag(f.name), **spec)
    return vars(parser.parse_args(argv))


def flag(name: str) -> str:
    """A setting's flag: position_lr -> --position-lr."""
    return "--" + name.replace("_", "-")


RUN_FILES = ("config.json", "metrics.jsonl", "heads.jsonl", "steps.jsonl", "checkpoint.pt")


def output_folder(out: str, default: str) -> Path:
    """The folder a command writes to: `out`, else `default` (under runs/); refused (one line)
    when it holds a run, which only `train.py --resume` may write to."""
    folder = Path(out or default)
    held = [name for name in RUN_FILES if (folder / name).exists()]
    if held:
        resume = f"continue it with python train.py --resume {folder}, or " if "checkpoint.pt" in held else ""
        raise ValueError(f"{folder} holds a run ({', '.join(held)}): {resume}choose another --out")
    return folder


def command_line(main, errors: tuple):
    """Run a script's `main()` as a command: the process set up first (fast_cpu_process); an
    expected error (`errors`) printed as one line, exit 1; a stop at a batch boundary (Stop,
    already saved and said) exits 128 + the signal's number, as a shell reports it."""
    fast_cpu_process()  # before any parallel work
    code = 0
    try:
        main()
    except errors as e:
        print(f"error: {e}", file=sys.stderr)
        code = 1
    except Stop as e:
        code = 128 + e.signum
    except KeyboardInterrupt:
        code = 130
    exit_process(code)  # several processes: without the teardown that aborts Gloo's threads


# ---- device, processes and precision --------------------------------------------------------

def pick_device(name: str, flag: str = "--device") -> torch.device:
    """auto: cuda (this process's GPU under torchrun), then mps, then cpu; else the device named."""
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


@contextlib.contextmanager
def processes(device: torch.device):
    """(rank, world) of this process: (0, 1) alone; under torchrun, its place in the process
    group (NCCL on GPUs, Gloo on CPUs), which is torn down however the block ends."""
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    try:
        yield rank, world
    finally:
        if world > 1 and dist.is_initialized():
            dist.destroy_process_group()


COMPILE_MODES = ("default", "reduce-overhead")


def compiled(net: torch.nn.Module, mode: str) -> torch.nn.Module:
    """`net` under torch.compile: default fuses a step's operators into fewer kernels, compiled
    at its first steps; reduce-overhead also records the forward and the backward once as CUDA
    graphs and replays them, a launch a graph where eager launches each of hundreds of kernels.
    Its dropout draws eager's masks (inductor's fallback_random), not inductor's own: a compiled
    model computes the eager model's function, within round-off (test_all.py)."""
    return torch.compile(net, options=torch._inductor.list_mode_options(mode) | {"fallback_random": True})


PRECISIONS = ("fp32", "bf16", "fp16")
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def decide_precision(name: str, device: torch.device, world: int) -> tuple:
    """(precision, why): `name`, or for auto what the device computes natively (choose_precision),
    decided by the first process for all of them."""
    if name != "auto":
        return name, f"{name}: --precision"
    precision, reason = choose_precision(device)
    if world > 1:  # every process computes as the first decided
        choice = torch.tensor(PRECISIONS.index(precision), device=device)
        dist.broadcast(choice, 0)
        precision = PRECISIONS[int(choice.item())]
    return precision, reason


def cpu_bf16_speedup() -> float:
    """How many times faster this CPU multiplies bf16 matrices than fp32 ones (AVX512-BF16 and AMX: > 1)."""
    def seconds(dtype):
        a = torch.randn(512, 512).to(dtype)
        a @ a  # warm-up
        start = time.perf_counter()
        for _ in range(8):
            a @ a
        return time.perf_counter() - start

    return seconds(torch.float32) / seconds(torch.bfloat16)


def choose_precision(device: torch.device) -> tuple:
    """(precision, the one-line reason): what the device computes natively. CUDA: bf16 from
    capability 8.0 (A100, H100, RTX 30xx); below it (T4, V100) fp16 tensor cores with a gradient
    scaler, since there bf16 is emulated (torch.cuda.is_bf16_supported() answers True for
    emulation). MPS: fp32 (float16 autocast exists there, but its speed and range for this model
    are unmeasured). A CPU: bf16 when its product measures at least 1.5x fp32."""
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        if major >= 8:
            return "bf16", f"bf16: CUDA capability {major}.{minor}"
        return "fp16", f"fp16 with a gradient scaler: CUDA capability {major}.{minor} has no bf16 units"
    if device.type != "cpu":
        return "fp32", f"fp32: {device.type.upper()} mixed precision is unmeasured"
    speedup = cpu_bf16_speedup()
    precision = "bf16" if speedup >= 1.5 else "fp32"
    return precision, f"{precision}: CPU bf16 product {speedup:.2g}x fp32"


# ---- progress -----------------------------------------------------------------------------

def duration(seconds: float) -> str:
    if seconds < 3600:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h" if seconds < 2 * 86400 else f"{seconds / 86400:.0f} days"


class Progress:
    """Where the run stands, on stderr: a bar within the epoch on a terminal (four lines per epoch
    in a log file) with images/s and the whole run's remaining time, and once the steps run at
    their steady pace one estimate of the whole run, with a warning when a CPU would take over
    a day. Evaluation is counted as `eval_share` of a step's time per step (its forward passes)."""

    def __init__(self, steps_per_epoch: int, total_steps: int, batch_size: int, device, enabled: bool,
                 eval_share: float = 0.0):
        self.steps_per_epoch, self.total_steps, self.batch_size = steps_per_epoch, total_steps, batch_size
        self.device, self.enabled, self.tty, self.eval_share = device, enabled, sys.stderr.isatty(), eval_share
        self.steps, self.seconds, self.last_print, self.estimated = 0, 0.0, 0.0, False
        self.warm, self.warm_seconds = None, 0.0  # the last warm-up step, once known

    def step(self, seconds: float, done: int, text):
        """A step of `seconds`; `done` steps of the run so far. The first tenth of an epoch (or
        30 s, if sooner) is warm-up; the steps after it are timed."""
        self.steps += 1
        if self.warm is None:
            self.warm_seconds += seconds
            if self.steps >= max(1, self.steps_per_epoch // 10) or self.warm_seconds >= 30:
                self.warm = self.steps
            return
        self.seconds += seconds
        if not self.enabled:
            return
        per_step = self.seconds / (self.steps - self.warm)
        remaining = (self.total_steps - done) * per_step * (1 + self.eval_share)
        if not self.estimated:  # within a minute of steady steps even where a step takes 30 s
            self.estimated = True
            warning = ("; over a day on this CPU: --preset laptop trains the 2-layer model in minutes"
                       if self.device.type == "cpu" and remaining > 86400 else "")
            print(f"estimate: {per_step:.2f} s per step, {self.total_steps - done:,} steps to go with evaluation: "
                  f"{duration(remaining)}{warning}", file=sys.stderr, flush=True)
        in_epoch = (done - 1) % self.steps_per_epoch + 1
        on_terminal = self.tty and time.time() - self.last_print > 0.5
        if not on_terminal and (self.tty or in_epoch % max(1, self.steps_per_epoch // 4)):
            return
        line = (f"{in_epoch}/{self.steps_per_epoch} {text()}, {self.batch_size / per_step:.0f} img/s, "
                f"run ETA {duration(remaining)}")
        if on_terminal:
            bar = "#" * (30 * in_epoch // self.steps_per_epoch)
            print(f"\r  [{bar:<30}] {line}", end="", file=sys.stderr, flush=True)
            self.last_print = time.time()
        else:
            print(f"  {line}", file=sys.stderr, flush=True)

    def end_epoch(self):
        if self.enabled and self.tty:
            print("\r" + " " * 100 + "\r", end="", file=sys.stderr, flush=True)


# ---- stop signals -------------------------------------------------------------------------

class TrainingError(RuntimeError):
    """Training cannot go on (a non-finite loss); the message says what is kept."""


class Stop(KeyboardInterrupt):
    """The run stopped at a batch boundary after SIGINT or SIGTERM, its state saved there."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class StopSignal:
    """SIGINT (Ctrl-C) and SIGTERM (a cluster scheduler's notice) only set a flag, which the
    training loop reads between batches: the run saves there and stops, with the weights,
    optimizer and RNG of a batch boundary, wherever the signal landed (forward, backward,
    evaluation, checkpoint writing). A second Ctrl-C stops at once; the last checkpoint stays."""

    def __init__(self, device, world: int, verbose: bool):
        self.device, self.world, self.verbose, self.received, self.previous = device, world, verbose, 0, {}
        self.signum = 0  # the signal every process agreed to stop for

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self.previous = {s: signal.signal(s, self.handle) for s in (signal.SIGINT, signal.SIGTERM)}
        return self

    def __exit__(self, *exc):
        for s, handler in self.previous.items():
            signal.signal(s, handler)

    def handle(self, signum, frame):
        if self.received and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.received = self.received or signum
        if self.verbose:
            print(f"\n{signal.Signals(signum).name}: stopping after this batch and saving "
                  "(Ctrl-C again: stop now, keeping the last checkpoint)", file=sys.stderr, flush=True)

    def requested(self) -> int:
        """The signal to stop for (0: none), agreed by every process; kept in `signum`."""
        if self.world == 1:
            self.signum = self.received
        else:
            flag = torch.tensor(self.received, device=self.device)
            dist.all_reduce(flag, dist.ReduceOp.MAX)
            self.signum = int(flag.item())
        return self.signum


# ---- the process --------------------------------------------------------------------------

def fast_cpu_process():
    """What every script that trains, evaluates or times the network calls first in its
    `main`, before any parallel work: freed memory kept, subnormals flushed."""
    keep_freed_memory()
    flush_subnormals()


def flush_subnormals() -> bool:
    """Compute subnormal floats (below 1.2e-38 in fp32) as zero, in this thread and every
    worker thread PyTorch starts after it; True where the CPU allows it (x86, AArch64).

    A quadratic head's probabilities exp(-alpha ||delta||^2) underflow through the subnormal
    range, and Intel cores multiply subnormal operands through slow microcode assists: on an
    Intel Xeon (Ice Lake) the paper-size fast layer ran at 6.2-6.6x its Linear floor with them,
    1.8x without (lab/RESULTS.md). Only numbers below 1.2e-38 change, to 0. A worker thread
    copies the flag from the thread that creates it, so this must run before the first
    parallel operation starts PyTorch's thread pool; called later it reaches this thread only."""
    return torch.set_flush_denormal(True)


def keep_freed_memory() -> bool:
    """Have glibc keep freed memory for the process's next allocation (Linux; elsewhere a no-op).

    By default glibc hands every block over 32 MB back to the operating system when it is
    freed, and trims the heap's top; a training step frees and allocates such blocks every
    step, and each comes back as fresh pages, zeroed one 4 kB page fault at a time (on a
    2-core AVX512-BF16 EPYC VM, 20,000-27,000 faults per fp32 step of the tiny model:
    lab/RESULTS.md). The price: the process keeps the most memory it ever used. True when both
    settings took."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4  # from <malloc.h>
    return bool(libc.mallopt(M_MMAP_MAX, 0) and libc.mallopt(M_TRIM_THRESHOLD, 2**30))


def exit_process(code: int):
    """End the process with exit status `code`; a process of a multi-process run (torchrun's
    WORLD_SIZE > 1) at once, its output flushed, without the interpreter's and C++'s exit-time
    teardown.

    Why: constructing DistributedDataParallel leaves a C++ reference to the Gloo process group
    that outlives both the DDP object and dist.destroy_process_group(): its three threads
    (gloo_tcp_loop, two pt_gloo_runloop) still run after both, while a group used without DDP
    ends them at destroy_process_group (torch 2.13; lab/RESULTS.md). At a normal exit C++ then
    destroys static objects beside those running threads, and a still-joinable std::thread
    calls std::terminate ("terminate called without an active exception"): SIGABRT, in 2-3 of
    10 two-process runs, after the run had saved and printed everything. Every file is written
    and closed before this point, so ending here loses nothing."""
    if int(os.environ.get("WORLD_SIZE", 1)) > 1:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)
