"""Speed and memory of the attention layers and models (no timed assertions: numbers only).

    python bench.py                    # layer and model tables on every device present
    python bench.py --quick            # the small smoke version the tests run
    python bench.py --json bench.json  # also write the numbers with device, torch and commit

1. Layer: SelfAttention2d at the paper's size (16 x 16 grid, dim 400, 9 heads; batch 100 on
   a GPU, 16 on the CPU), forward + backward, impl="dense" (the T x T product, as the
   authors' code does it) against impl="fast", for every encoding; and the layer's own
   Linear(3600, 400) alone on the same input, the floor any implementation pays.
2. Model: training images/s of SelfAttentionNet and ResNet18 at batch 100 with the options
   train.py uses (bf16 autocast and torch.compile on a GPU), and the implied 300 epochs.

Times are medians over repeats after warm-up. Memory is the peak allocated on a GPU; on
the CPU, where PyTorch keeps no such counter, it is the bytes of tensors saved for the
backward pass (the activation memory a training step holds).
"""
import argparse
import json
import statistics
import time
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F

from attention import ENCODINGS, SelfAttention2d
from model import build_model
from train import environment

EPOCH_IMAGES = 50000


@dataclass
class Config:
    quick: bool = False
    json: str = ""
    repeats: int = 7
    devices: str = "auto"  # auto: cpu, and cuda when present


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


def measure(step, device, repeats: int, forward=None, warmup: int = 2) -> tuple:
    """(median seconds of step(), memory in bytes) after warm-up calls; on the CPU the
    memory is that saved by forward() (0 without one)."""
    for _ in range(warmup):
        step()
    sync(device)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        sync(device)
        times.append(time.perf_counter() - start)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        step()
        memory = torch.cuda.max_memory_allocated(device)
    else:
        memory = saved_bytes(forward) if forward else 0
    return statistics.median(times), memory


def layer_measure(module, x, device, repeats: int) -> tuple:
    """forward + backward of a module on a fixed input that needs its gradient too."""
    x = x.requires_grad_()

    def step():
        module(x).sum().backward()
        module.zero_grad(set_to_none=True)
        x.grad = None

    return measure(step, device, repeats, forward=lambda: module(x))


def bench_layers(device, cfg: Config) -> list:
    batch, dim, grid = (4, 64, (8, 8)) if cfg.quick else (100 if device.type == "cuda" else 16, 400, (16, 16))
    heads = 9
    x = torch.randn(batch, *grid, dim, device=device)
    linear = torch.nn.Linear(heads * dim, dim).to(device)
    floor, floor_mem = layer_measure(linear, torch.randn(batch, *grid, heads * dim, device=device), device, cfg.repeats)
    rows = [dict(device=str(device), kind="layer", name=f"Linear({heads * dim}, {dim}) alone", batch=batch,
                 fast_s=floor, fast_bytes=floor_mem)]
    for name in ENCODINGS + ("quadratic+content",):
        encoding, content = name.split("+")[0], name.endswith("content")
        torch.manual_seed(0)
        fast = SelfAttention2d(dim, heads, grid, encoding, content, impl="fast").to(device)
        dense = SelfAttention2d(dim, heads, grid, encoding, content, impl="dense").to(device)
        dense.load_state_dict(fast.state_dict())
        dense_s, dense_mem = layer_measure(dense, x, device, cfg.repeats)
        fast_s, fast_mem = layer_measure(fast, x, device, cfg.repeats)
        rows.append(dict(device=str(device), kind="layer", name=name, batch=batch, dense_s=dense_s, fast_s=fast_s,
                         speedup=dense_s / fast_s, dense_bytes=dense_mem, fast_bytes=fast_mem,
                         floor_multiple=fast_s / floor))
    return rows


def bench_models(device, cfg: Config) -> list:
    gpu = device.type == "cuda"
    batch = 4 if cfg.quick else 100
    small = dict(layers=1, dim=32, ffn_dim=32, heads=4) if cfg.quick else {}
    rows = []
    for name in ("quadratic", "gaussian", "learned", "resnet18"):
        torch.manual_seed(0)
        model = build_model(name, **(small if name != "resnet18" else dict(width=8) if cfg.quick else {})).to(device)
        if gpu and name == "resnet18":
            model = model.to(memory_format=torch.channels_last)
        net = torch.compile(model) if gpu else model
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        images = torch.randn(batch, 3, 32, 32, device=device)
        labels = torch.randint(0, 10, (batch,), device=device)

        def step():
            with torch.autocast("cuda", torch.bfloat16, enabled=gpu):
                loss = F.cross_entropy(net(images).float(), labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()

        seconds, _ = measure(step, device, max(3, cfg.repeats // 2), warmup=1)
        rate = batch / seconds
        rows.append(dict(device=str(device), kind="model", name=name, batch=batch, images_per_s=rate,
                         bf16=gpu, compiled=gpu, hours_300_epochs=300 * EPOCH_IMAGES / rate / 3600))
    return rows


def print_tables(rows: list):
    for device in dict.fromkeys(r["device"] for r in rows):
        layer = [r for r in rows if r["device"] == device and r["kind"] == "layer"]
        print(f"\nLayer forward + backward on {device}, batch {layer[0]['batch']} "
              f"(memory: {'peak allocated' if device.startswith('cuda') else 'tensors saved for backward'})")
        print(f"{'encoding':<20}{'dense ms':>10}{'fast ms':>10}{'speed-up':>10}{'dense MB':>10}{'fast MB':>10}{'x Linear':>10}")
        for r in layer:
            if "dense_s" in r:
                print(f"{r['name']:<20}{r['dense_s'] * 1e3:>10.1f}{r['fast_s'] * 1e3:>10.1f}{r['speedup']:>9.2f}x"
                      f"{r['dense_bytes'] / 2**20:>10.0f}{r['fast_bytes'] / 2**20:>10.0f}{r['floor_multiple']:>9.2f}x")
            else:
                print(f"{r['name']:<20}{'':>10}{r['fast_s'] * 1e3:>10.1f}{'':>10}{'':>10}{r['fast_bytes'] / 2**20:>10.0f}{1:>9.2f}x")
        models = [r for r in rows if r["device"] == device and r["kind"] == "model"]
        print(f"\nTraining step on {device}, batch {models[0]['batch']}, bf16 and compile: {models[0]['bf16']}")
        print(f"{'model':<12}{'images/s':>10}{'300 epochs':>14}")
        for r in models:
            print(f"{r['name']:<12}{r['images_per_s']:>10.0f}{r['hours_300_epochs']:>12.1f} h")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    parser.add_argument("--json", default="", help="write the numbers to this file")
    parser.add_argument("--repeats", type=int, default=Config.repeats, help="timed repeats per measurement")
    parser.add_argument("--devices", default="auto", help="comma-separated, e.g. cpu,cuda (default: all present)")
    cfg = Config(**vars(parser.parse_args()))
    names = cfg.devices.split(",") if cfg.devices != "auto" else ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    rows = []
    for device in map(torch.device, names):
        rows += bench_layers(device, cfg) + bench_models(device, cfg)
    print_tables(rows)
    if cfg.json:
        env = {name: environment(torch.device(name)) for name in names}
        with open(cfg.json, "w") as f:
            json.dump(dict(config=asdict(cfg), environment=env, rows=rows), f, indent=1)
        print(f"\nwrote {cfg.json}")


if __name__ == "__main__":
    main()
