"""Speed and memory of the attention layers and models (no timed assertions: numbers only).

    python -m lab.bench                    # peaks, model and layer tables on every device present
    python -m lab.bench --quick            # the small smoke version the tests run
    python -m lab.bench --json bench.json  # also the numbers with device, torch and commit, after each table

0. Peak: an n x n matrix product in fp32 and in bf16 (n = 2048; on a GPU 8192), the ceiling
   of every figure below (timed beside every model row; the headline is the best of them).
1. Layer: SelfAttention2d at the paper's size (16 x 16 grid, dim 400, 9 heads; batch 100 on
   a GPU, 16 on the CPU), forward + backward, the paper's SelfAttention2d ("dense": the
   T x T product, as the authors' code does it) against FastSelfAttention2d ("fast", what
   the network uses), for every encoding, also with dropout 0.1 on
   the attention probabilities (training mode), which takes the fast layer's dense path (also
   under bf16 autocast where the device computes bf16 natively); "quadratic+dense path" times the
   fast layer's two paths without dropout, its dense path ("dense" there) against the factorized
   (in fp32, and in bf16 where native); and the layer's own Linear(3600, 400) alone
   on the same input, the floor any implementation pays ("x Linear": a layer's time over
   the floor's, timed alongside it).
2. Model: a training step (forward, backward, SGD) as images/s and as utilization, the
   step's FLOPs per second (its matrix products counted by torch.utils.flop_counter as
   train.py runs it: train mode, attention dropout as the row sets it) over the peak of the
   precision used, timed beside the row, in fp32 and under bf16 autocast: the tiny preset's
   model at batch 100, one paper-size block (dim 400) and the paper's 6-block model at batch
   16 (attention dropout off: the factorized path; on a GPU also with the authors' attention dropout, and with
   --compile under torch.compile), and ResNet18.
3. Operators: how many a training step of the paper's model dispatches as train.py runs it
   (on a GPU, kernel launches: at the paper's batch the step may be bound by them).
4. Subnormals (CPU): the fast quadratic layer with subnormal floats computed against flushed
   to zero, in one thread. Its probabilities exp(-alpha d^2) underflow through the subnormal
   range; Intel cores compute those through slow microcode, so every script flushes them.

Times are the fastest of the repeats after warm-up (on a GPU, each repeat the mean of 5 calls
between synchronizations, as training queues its steps), and what a row compares (dense, fast and
the Linear floor; fp32 and bf16) runs interleaved, one repeat of each in turn: on a shared
CPU, neighbours slow some repeats by 20-50%, and ratios taken side by side stay put. Memory
is the peak allocated on a GPU; on the CPU, where PyTorch keeps no such counter, it is the
bytes of tensors saved for the backward pass (the activation memory a training step holds).
"""
import json
import time
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

import train
from attention import ENCODINGS, FastSelfAttention2d, SelfAttention2d
from model import build_model, counted_flops
from records import environment
from runtime import choose_precision, command_line, compiled, option, parse_flags, pick_device


@dataclass
class Config:
    quick: bool = option(False, "small sizes: a smoke run")
    json: str = option("", "also write the numbers to this file, rewritten as each table finishes")
    compile: bool = option(False, "a GPU: also the paper's model under torch.compile (minutes of compilation)")
    repeats: int = option(7, "timed repeats per measurement")
    devices: str = option("auto", "comma-separated, e.g. cpu,cuda (auto: every device present)")

GPU_CALLS = 5  # calls a timed round makes on a GPU between synchronizations
PEAK_N = {"cpu": 2048, "cuda": 8192}  # the peak's n x n: on an H100 a 2048 bf16 product is over in about 0.1 ms


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def saved_bytes(fn) -> int:
    """Bytes of the distinct tensors autograd saves while fn() builds its graph."""
    storages = {}

    def pack(t):
        storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    del out
    return sum(storages.values())


def measure(steps: dict, device, repeats: int, warmup: int = 2) -> dict:
    """{name: fastest seconds of step()} over `repeats` rounds that each run every step once,
    after warm-up. Steps compared in one row run side by side, so they see the same machine;
    on a shared CPU the fastest repeat is the one its neighbours disturbed least. On a GPU a
    round times GPU_CALLS calls between two synchronizations, as training queues its steps:
    a sync around each call would add the launches of every call to its time."""
    calls = GPU_CALLS if device.type == "cuda" else 1
    for step in steps.values():
        for _ in range(warmup):
            step()
    times = {name: [] for name in steps}
    for _ in range(repeats):
        for name, step in steps.items():
            sync(device)
            start = time.perf_counter()
            for _ in range(calls):
                step()
            sync(device)
            times[name].append((time.perf_counter() - start) / calls)
    return {name: min(t) for name, t in times.items()}


def memory(step, forward, device) -> int:
    """Peak bytes allocated by step() on a GPU; on the CPU, the bytes forward() saves for backward."""
    if device.type != "cuda":
        return saved_bytes(forward)
    torch.cuda.reset_peak_memory_stats(device)
    step()
    return torch.cuda.max_memory_allocated(device)


def layer_step(module, x, bf16: bool = False):
    """forward + backward of a module on a fixed input that needs its gradient too; with `bf16`
    the forward under bf16 autocast, as train.py runs it."""
    x = x.requires_grad_()

    def forward():
        with train.autocast(x.device, "bf16" if bf16 else "fp32"):
            return module(x).float()

    def step():
        forward().sum().backward()
        module.zero_grad(set_to_none=True)
        x.grad = None

    return step, forward


def matmul(device, dtype, n: int) -> tuple:
    """(step, FLOPs) of an n x n matrix product: the most a model of matrix products can reach."""
    a, c = torch.randn(n, n, device=device).to(dtype), torch.empty(n, n, device=device, dtype=dtype)
    return (lambda: torch.mm(a, a, out=c)), 2 * n**3


class DensePath(FastSelfAttention2d):
    """The fast layer held to its dense path (every head's T x T probabilities in one product),
    which it takes only for attention dropout or inseparable logits: what that path costs where
    the layer would factorize."""
    factorized = False


def bench_layers(device, cfg: Config) -> list:
    batch, dim, grid = (4, 64, (8, 8)) if cfg.quick else (100 if device.type == "cuda" else 16, 400, (16, 16))
    heads = 9
    x = torch.randn(batch, *grid, dim, device=device)
    linear = layer_step(torch.nn.Linear(heads * dim, dim).to(device), torch.randn(batch, *grid, heads * dim, device=device))
    floor = measure({"linear": linear[0]}, device, cfg.repeats)["linear"]
    rows = [dict(device=str(device), kind="layer", name=f"Linear({heads * dim}, {dim}) alone", batch=batch,
                 fast_s=floor, fast_bytes=memory(*linear, device))]
    quadratic, *others = ENCODINGS
    names = [quadratic, "quadratic+dense path", *others, "quadratic+content"] + [f"{e}+attn dropout" for e in ENCODINGS]
    if choose_precision(device)[0] == "bf16":  # under bf16 autocast: the two paths, and the dense as A.4 trains it
        names += ["quadratic+dense path+bf16", "quadratic+attn dropout+bf16", "gaussian+attn dropout+bf16"]
    for name in names:
        encoding, content, dropout = name.split("+")[0], name.endswith("content"), 0.1 * ("dropout" in name)
        torch.manual_seed(0)
        fast = FastSelfAttention2d(dim, heads, grid, encoding, content, dropout).to(device)
        reference = DensePath if "dense path" in name else SelfAttention2d
        dense = reference(dim, heads, grid, encoding, content, dropout).to(device)
        dense.load_state_dict(fast.state_dict())
        bf16 = name.endswith("bf16")
        steps = dict(dense=layer_step(dense, x, bf16), fast=layer_step(fast, x, bf16), floor=linear)
        s = measure({k: v[0] for k, v in steps.items()}, device, cfg.repeats)
        rows.append(dict(device=str(device), kind="layer", name=name, batch=batch, dense_s=s["dense"], fast_s=s["fast"],
                         speedup=s["dense"] / s["fast"], dense_bytes=memory(*steps["dense"], device),
                         fast_bytes=memory(*steps["fast"], device), floor_multiple=s["fast"] / s["floor"]))
    return rows


def bench_subnormals(device, cfg: Config) -> list:
    """The fast quadratic layer at the paper's size with subnormal floats computed and with
    them flushed to zero (runtime.flush_subnormals), interleaved in one thread: the flag is a
    thread's own, and a worker thread keeps the one it started with."""
    if device.type != "cpu":
        return []
    batch, dim, grid = (4, 64, (8, 8)) if cfg.quick else (16, 400, (16, 16))
    torch.manual_seed(0)
    step, _ = layer_step(FastSelfAttention2d(dim, 9, grid, "quadratic"), torch.randn(batch, *grid, dim))

    def computed():
        torch.set_flush_denormal(False)
        step()
        torch.set_flush_denormal(True)

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        s = measure(dict(computed=computed, flushed=step), device, cfg.repeats)
    finally:
        torch.set_num_threads(threads)
    return [dict(device=str(device), kind="subnormals", name="quadratic", batch=batch, computed_s=s["computed"],
                 flushed_s=s["flushed"], speedup=s["computed"] / s["flushed"])]


class Operators(TorchDispatchMode):
    """Counts the operators dispatched under it: on a GPU each launches a kernel; a view launches none."""

    def __init__(self):
        super().__init__()
        self.operators, self.views = 0, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.is_view:
            self.views += 1
        else:
            self.operators += 1
        return func(*args, **(kwargs or {}))


def bench_operators(device, cfg: Config) -> list:
    """Operators a training step dispatches, the paper's model as train.py trains it (A.4's
    settings, the authors' attention dropout, train.py's autocast and SGD), at batch 2: the
    count does not depend on the batch. Counted at the second step, when momentum exists."""
    overrides = dict(layers=2, dim=32, ffn_dim=32, heads=4) if cfg.quick else {}
    torch.manual_seed(0)
    model = build_model("quadratic", layer=FastSelfAttention2d, **overrides).to(device)
    precision = choose_precision(device)[0]
    optimizer = train.make_optimizer(model, train.Config(), device)
    images, labels = torch.randn(2, 3, 32, 32, device=device), torch.randint(0, 10, (2,), device=device)
    for _ in range(2):
        with Operators() as counted:
            with train.autocast(device, precision):
                loss = F.cross_entropy(model.train()(images).float(), labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
    return [dict(device=str(device), kind="operators", name="paper model quadratic" + " (quick)" * cfg.quick,
                 precision=precision, operators=counted.operators, views=counted.views)]


def model_sizes(quick: bool, gpu: bool = False, compiled: bool = False) -> list:
    """(row name, build_model name, overrides, batch) of every model row: the paper-size rows at
    batch 16 on a CPU, at A.4's 100 on a GPU; there the paper's model also as train.py runs A.4's
    recipe, with dropout 0.1 on the attention probabilities (the authors' code)."""
    tiny = dict(layers=1, dim=16, ffn_dim=16, heads=4) if quick else dict(layers=2, dim=64, ffn_dim=128)
    block = dict(layers=1, dim=32, ffn_dim=32, heads=4) if quick else dict(layers=1, dim=400, ffn_dim=512)
    fast = dict(attention_dropout=0.0, layer=FastSelfAttention2d)  # the network as train.py runs it
    rows = [(f"tiny {e}", e, tiny | fast, 4 if quick else 100) for e in ("quadratic", "gaussian", "learned")]
    big = 4 if quick else 100 if gpu else 16
    rows += [(f"paper block {e}", e, block | fast, big) for e in ("quadratic", "learned", "sinusoidal")]
    paper = block | dict(layers=2) if quick else {}  # the 6 blocks of section 4.1
    rows += [("paper model quadratic", "quadratic", paper | fast, big)]
    if gpu:  # with the authors' attention dropout 0.1; torch.compile'd (its first steps, the compilation, are warm-up)
        rows += [("paper model, attention dropout", "quadratic", paper | dict(layer=FastSelfAttention2d), big)]
        rows += [("paper model quadratic, compiled", "quadratic", paper | fast, big)] if compiled else []
    return rows + [("resnet18", "resnet18", dict(width=8) if quick else {}, 4 if quick else 100)]


def training_step(net, batch: int, device):
    """step(dtype): forward, cross-entropy, backward and an SGD step on random images, in
    fp32 or under bf16 autocast."""
    optimizer = train.make_optimizer(net, train.Config(lr=0.01), device)  # as train.py's
    images = torch.randn(batch, 3, 32, 32, device=device)
    labels = torch.randint(0, 10, (batch,), device=device)

    def step(dtype):
        with train.autocast(device, "bf16" if dtype == torch.bfloat16 else "fp32"):
            loss = F.cross_entropy(net.train()(images).float(), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return step


def bench_models(device, cfg: Config) -> list:
    """Each row times its fp32 and bf16 steps beside the two matrix-product peaks, so that
    utilization divides numbers measured side by side. bf16 only where the device computes it
    natively (runtime.choose_precision): without bf16 units a bf16 step of the 6-layer model
    ran about 10x slower than fp32 (RESULTS.md), and these rows would take hours."""
    precision, reason = choose_precision(device)
    dtypes = (torch.float32, torch.bfloat16) if precision == "bf16" else (torch.float32,)
    products = {str(d)[6:]: matmul(device, d, 256 if cfg.quick else PEAK_N.get(device.type, 2048)) for d in dtypes}
    rows = [] if precision == "bf16" else [dict(device=str(device), kind="untimed", name="bfloat16", reason=reason)]
    for row, name, overrides, batch in model_sizes(cfg.quick, device.type == "cuda", cfg.compile):
        torch.manual_seed(0)
        model = build_model(name, **overrides).to(device)
        flops = counted_flops(model, training=True) * batch  # the step's forward and backward, as it trains
        net = compiled(model, "default") if row.endswith("compiled") else model
        step = training_step(net, batch, device)
        steps = {str(d)[6:]: lambda d=d: step(d) for d in dtypes} | {f"peak {p}": mm for p, (mm, _) in products.items()}
        seconds = measure(steps, device, cfg.repeats)
        for dtype, (_, peak_flops) in products.items():  # "float32", "bfloat16": torch's names
            peak = peak_flops / seconds[f"peak {dtype}"]
            rows.append(dict(device=str(device), kind="model", name=row, batch=batch, precision=dtype,
                             images_per_s=batch / seconds[dtype], gflop_per_image=flops / batch / 1e9,
                             peak_flop_per_s=peak, utilization=flops / seconds[dtype] / peak,
                             compiled=row.endswith("compiled")))
    return rows


def peaks(rows: list, device: str) -> dict:
    """{precision: the fastest matrix product timed beside any model row}, FLOP/s."""
    models = [r for r in rows if r["device"] == device and r["kind"] == "model"]
    return {p: max(r["peak_flop_per_s"] for r in models if r["precision"] == p)
            for p in dict.fromkeys(r["precision"] for r in models)}


def print_tables(rows: list, hardware: dict):
    for device in dict.fromkeys(r["device"] for r in rows):
        p = peaks(rows, device)
        untimed = [r for r in rows if r["device"] == device and r["kind"] == "untimed"]
        bf16 = (f"bf16 {p['bfloat16'] / 1e9:.0f} GFLOP/s ({p['bfloat16'] / p['float32']:.1f}x)" if "bfloat16" in p
                else f"bf16 not timed ({untimed[0]['reason']})")
        print(f"\nMatrix-product peak on {device} ({hardware[device]}): fp32 {p['float32'] / 1e9:.0f} GFLOP/s, "
              f"{bf16}, the best of the rows below")
        layer = [r for r in rows if r["device"] == device and r["kind"] == "layer"]
        print(f"\nLayer forward + backward on {device}, batch {layer[0]['batch']} "
              f"(memory: {'peak allocated' if device.startswith('cuda') else 'tensors saved for backward'})")
        print(f"{'encoding':<26}{'dense ms':>10}{'fast ms':>10}{'speed-up':>10}{'dense MB':>10}{'fast MB':>10}{'x Linear':>10}")
        for r in layer:
            if "dense_s" in r:
                print(f"{r['name']:<26}{r['dense_s'] * 1e3:>10.1f}{r['fast_s'] * 1e3:>10.1f}{r['speedup']:>9.2f}x"
                      f"{r['dense_bytes'] / 2**20:>10.0f}{r['fast_bytes'] / 2**20:>10.0f}{r['floor_multiple']:>9.2f}x")
            else:
                print(f"{r['name']:<26}{'':>10}{r['fast_s'] * 1e3:>10.1f}{'':>10}{'':>10}{r['fast_bytes'] / 2**20:>10.0f}{1:>9.2f}x")
        for r in (r for r in rows if r["device"] == device and r["kind"] == "operators"):
            print(f"\nA training step of the {r['name']} on {device} ({r['precision']}, train.py's SGD): "
                  f"{r['operators']:,} operators dispatched (+ {r['views']:,} views, which launch no kernel)")
        for r in (r for r in rows if r["device"] == device and r["kind"] == "subnormals"):
            print(f"\nSubnormals on {device} ({hardware[device]}), the fast {r['name']} layer in one thread, batch "
                  f"{r['batch']}: computed {r['computed_s'] * 1e3:.1f} ms, flushed to zero {r['flushed_s'] * 1e3:.1f} ms "
                  f"({r['speedup']:.2f}x); every script flushes them")
        models = [r for r in rows if r["device"] == device and r["kind"] == "model"]
        print(f"\nTraining step on {device} (torch.compile: the rows that say so); utilization = model FLOP/s "
              "over the peak of the precision, the matrix product timed beside the row (GFLOP/s)")
        print(f"{'model':<32}{'batch':>6}{'GFLOP/img':>11}{'fp32 img/s':>12}{'util':>6}{'peak':>6}"
              f"{'bf16 img/s':>12}{'util':>6}{'peak':>6}")
        by_name = {}  # name -> {precision: row}
        for r in models:
            by_name.setdefault(r["name"], {})[r["precision"]] = r
        for name, row in by_name.items():
            fp32 = row["float32"]
            print(f"{name:<32}{fp32['batch']:>6}{fp32['gflop_per_image']:>11.3f}" + "".join(
                f"{r['images_per_s']:>12.0f}{r['utilization']:>6.0%}{r['peak_flop_per_s'] / 1e9:>6.0f}" if r else
                f"{'-':>12}{'':>12}" for r in (fp32, row.get("bfloat16"))))


def main():
    cfg = Config(**parse_flags(Config, __doc__))
    names = cfg.devices.split(",") if cfg.devices != "auto" else ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    names = [str(pick_device(name, "--devices")) for name in names]
    env = {name: environment(torch.device(name)) for name in names}
    rows = []
    for device in map(torch.device, names):
        for table in (bench_models, bench_layers, bench_operators, bench_subnormals):  # each kept once timed
            rows += table(device, cfg)
            if cfg.json:
                with open(cfg.json, "w") as f:
                    json.dump(dict(config=asdict(cfg), environment=env, peaks={d: peaks(rows, d) for d in env},
                                   rows=rows), f, indent=1)
    print_tables(rows, {name: e["hardware"] for name, e in env.items()})
    if cfg.json:
        print(f"\nwrote {cfg.json}")


if __name__ == "__main__":
    command_line(main, (ValueError,))
