"""Day 3's items: A.4's schedule, the one-pixel heads and the start's chance level against
closed forms and measures.py, then your training run against the band of committed runs.

The bands (BANDS) are the least and the greatest value over the committed runs of day 3's
command, in fp32 and in bf16 (lab/results/course/train-{fp32,bf16}-s*). MARGIN widens them for
a seed or data the runs did not see (the official archive rather than our JPEG copy).
exercises/test_exercises.py recomputes the bands from those runs.
"""
import functools
import json
import math

import torch

from exercises.check import Item
from measures import central_probs, fresh_start_held, layer_at, nearest_pixels, one_pixel_heads
from records import load_checkpoint, model_from_checkpoint

WRITE = ("warmup_cosine", "one_pixel_heads", "nearest_pixels", "fresh_start_held")  # exercises/day3_training.py
STRETCH = ()

# day 3's command: python train.py --preset laptop --epochs 2 --precision fp32
COMMAND = dict(preset="laptop", encoding="quadratic", layers=2, dim=64, epochs=2, lr=0.05, position_lr=10.0)
# (measure, layer) -> (least, greatest) over the committed runs
BANDS = {("one_pixel_heads", 1): (3, 7), ("one_pixel_heads", 2): (0, 0)}
MARGIN = 1


def schedule_error(yours) -> float:
    """max |yours - A.4's factor| over steps of a 1,000-step run with 50 warm-up steps."""
    expected = {0: 1 / 50, 24: 0.5, 49: 1.0, 50: 1.0, 525: 0.5, 999: 0.5 * (1 + math.cos(math.pi * 949 / 950))}
    return max(abs(yours.warmup_cosine(s, 1000, 0.05) - v) for s, v in expected.items())


def hand_probs() -> torch.Tensor:
    """Four heads over a 5 x 5 grid, central query (2, 2): one-hot at shift (-1, 2), 0.6 at
    shift (1, 0), uniform, and exactly 0.5 at shift (0, -2) (on the boundary: it counts)."""
    P = torch.full((4, 5, 5), 1 / 25, dtype=torch.float64)
    P[0] = 0
    P[0, 1, 4] = 1
    P[1] = 0.4 / 24
    P[1, 3, 2] = 0.6
    P[3] = 0.5 / 24
    P[3, 2, 0] = 0.5
    return P


HAND = {0: (-1, 2), 1: (1, 0), 3: (0, -2)}  # hand_probs' one-pixel heads and their shifts


def a_layer():
    """A 2-layer width-16 quadratic network's first layer with heads from sharp to wide: centers
    on and off pixels, alpha 0.3-5."""
    from model import SelfAttentionNet
    torch.manual_seed(0)
    layer = SelfAttentionNet(layers=1, dim=16, ffn_dim=16).attention_layers[0]
    with torch.no_grad():
        layer.encoding.centers.copy_(torch.tensor([[0, 1], [1, 1], [-2, 0], [0.4, -1.3], [2, 2], [0, 0], [-1, -1],
                                                   [1.5, 0.5], [3, -2]], dtype=torch.float32))
        layer.encoding.alpha = torch.tensor([5, 2, 0.3, 3, 0.8, 1, 4, 5, 0.5])
    return layer


def mismatches(found: dict, expected: dict) -> int:
    return len(set(found.items()) ^ set(expected.items()))


def monte_carlo_held(pixels, heads: int, center_std: float, draws: int = 200_000) -> float:
    """fresh_start_held by drawing starts (a fixed seed): an estimate apart from the closed form."""
    g = torch.Generator().manual_seed(0)
    nearest = (torch.randn(draws, heads, 2, generator=g, dtype=torch.float64) * center_std).round()
    return sum((nearest == torch.tensor(p, dtype=torch.float64)).all(-1).any(-1).double().mean().item()
               for p in set(pixels))


PIXELS = [(0, 0), (0, 1), (-1, 1), (2, -1), (3, 3), (0, 1)]  # (0, 1) twice: a pixel counts once


@functools.lru_cache(maxsize=2)
def read_run(run: str):
    """(the model now, the first snapshot of heads.jsonl) of a run of day 3's command, read once
    for all the items (none changes it)."""
    if not run:
        raise ValueError("no run given: train with day 3's command, then add --run RUN_FOLDER")
    checkpoint, path = load_checkpoint(run)
    config = checkpoint["config"]
    differs = {k: config.get(k) for k, v in COMMAND.items() if config.get(k) != v}
    if differs:
        raise ValueError(f"{run} is not a run of day 3's command: {differs}")
    if checkpoint["epoch"] < config["epochs"]:
        raise ValueError(f"{run} has trained {checkpoint['epoch']} of {config['epochs']} epochs: resume it first")
    start = json.loads((path.parent / "heads.jsonl").read_text().splitlines()[0])
    return model_from_checkpoint(checkpoint).eval(), start


def count(yours, run: str, layer: int, at_start: bool) -> int:
    """Your one_pixel_heads' count for a layer of your run, now or at its start."""
    model, start = read_run(run)
    found = model.attention_layers[layer - 1]
    found = layer_at(found, start["layers"][layer - 1]) if at_start else found
    return len(yours.one_pixel_heads(central_probs(found).double()))


def agreement(yours, run: str) -> int:
    """Heads on which your one_pixel_heads and measures.py's differ, over your run's layers."""
    model, _ = read_run(run)
    return sum(mismatches(yours.one_pixel_heads(central_probs(layer).double()), one_pixel_heads(layer))
               for layer in model.attention_layers)


def start_held(yours, run: str) -> int:
    """Of layer 1's one-pixel pixels now, how many your nearest_pixels says the start held, minus
    how many measures.py says: 0 when they agree."""
    model, start = read_run(run)
    layer, begun = model.attention_layers[0], start["layers"][0]
    pixels = set(one_pixel_heads(layer).values())
    mine = len(pixels & set(yours.nearest_pixels(torch.tensor(begun["centers"]))))
    return mine - len(pixels & set(nearest_pixels(begun)))


def items(run: str) -> list:
    P, layer = hand_probs(), a_layer()
    band = lambda key: dict(reference=BANDS[key][0], high=BANDS[key][1], tol=MARGIN, test="in band")
    return [
        Item("A.4's schedule: warm-up then cosine, 6 steps of a 1,000-step run", schedule_error, 0, 1e-12,
             "warm-up: (step + 1) / w for step < w, w = round(0.05 * total); then the cosine from step w"),
        Item("one_pixel_heads on a hand case (heads at shifts (-1, 2), (1, 0), a uniform head, exactly 0.5 at "
             "(0, -2)): wrong heads", lambda y: mismatches(y.one_pixel_heads(P), HAND), 0, 0,
             "the shift is key - query, (row, col), with the query at (H // 2, W // 2); a head with exactly "
             "`mass` on one key counts (>=, not >)"),
        Item("one_pixel_heads on a layer of nine heads, against measures.one_pixel_heads: wrong heads",
             lambda y: mismatches(y.one_pixel_heads(central_probs(layer).double()), one_pixel_heads(layer)), 0, 0,
             "a head counts when its largest probability is at least `mass` (>=, not >)"),
        Item("nearest_pixels against measures.nearest_pixels: wrong heads",
             lambda y: sum(a != b for a, b in zip(y.nearest_pixels(layer.encoding.centers.detach()),
                                                  nearest_pixels({"centers": layer.encoding.centers.tolist()}))),
             0, 0, "round each coordinate; return Python ints"),
        Item("fresh_start_held, 9 heads of std 1.414, against measures.fresh_start_held (closed form)",
             lambda y: y.fresh_start_held(PIXELS, 9, 1.414), fresh_start_held(PIXELS, 9, 1.414), 1e-12,
             "each axis: P(v - 1/2 < x < v + 1/2) = "
             "(erf((v + 1/2) / (std sqrt 2)) - erf((v - 1/2) / (std sqrt 2))) / 2; "
             "a pixel given twice counts once (the distinct pixels)"),
        Item("fresh_start_held, 9 heads of std 2, against 200,000 drawn starts",
             lambda y: y.fresh_start_held(PIXELS, 9, 2.0), monte_carlo_held(PIXELS, 9, 2.0), 0.01,
             "a pixel is held when at least one of the heads lands on it: 1 - (1 - q)^heads"),
        Item("your run: layer 1's one-pixel heads at step 0 (heads.jsonl's start)",
             lambda y: count(y, run, 1, at_start=True), 0, 0,
             "at the start every alpha is about 0.5: no head reaches half its probability on one pixel"),
        Item("your run: layer 1's one-pixel heads after 1,000 steps, band of the committed runs",
             lambda y: count(y, run, 1, at_start=False),
             hint="outside the band of the committed runs: is it day 3's command, run to its end?",
             **band(("one_pixel_heads", 1))),
        Item("your run: layer 2's one-pixel heads after 1,000 steps, band of the committed runs",
             lambda y: count(y, run, 2, at_start=False),
             hint="outside the band of the committed runs: is it day 3's command, run to its end?",
             **band(("one_pixel_heads", 2))),
        Item("your run: heads where your one_pixel_heads and measures.py differ, both layers",
             lambda y: agreement(y, run), 0, 0, "compare with the hand case above"),
        Item("your run: layer 1's pixels its start held, yours minus measures.py's", lambda y: start_held(y, run), 0, 0,
             "a pixel is held when it is some head's nearest pixel at step 0"),
    ]
