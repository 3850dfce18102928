"""Day 3's items: A.4's schedule, the one-pixel heads and the start's chance level, written where
they live, then your training run against the band of committed runs.

    python -m exercises.check 3 --run runs/day3

The functions: train.warmup_cosine, measures.one_pixel_heads, measures.nearest_pixels and
measures.fresh_start_held. The references are written out here: A.4's factor at named steps in
closed form; literal one-pixel heads of layers whose heads the check places, on even and odd,
non-square grids; literal nearest pixels; the start's chance level from scipy's normal
distribution function and from seeded draws. Your run's counts are held to BANDS, the least and
the greatest value over the committed runs of day 3's command in fp32 and in bf16
(lab/results/course/train-{fp32,bf16}-s*), widened by MARGIN for a seed or data those runs did
not see (the official archive rather than our JPEG copy), and to a float64 softmax of its heads.
"""
import functools
import json
import math

import torch
from scipy.stats import norm

import attention
import measures
import train
from exercises.check import Item, Missing
from records import load_checkpoint, model_from_checkpoint

WRITE = {"train.py": ("warmup_cosine",),
         "measures.py": ("one_pixel_heads", "nearest_pixels", "fresh_start_held")}
STRETCH = {}

# day 3's command: python train.py --preset laptop --epochs 2 --precision fp32
COMMAND = dict(preset="laptop", encoding="quadratic", layers=2, dim=64, epochs=2, lr=0.05, position_lr=10.0)
GRID = (16, 16)  # its attention grid: 32 x 32 images after space-to-depth
# (measure, layer) -> (least, greatest) over the committed runs
BANDS = {("one_pixel_heads", 1): (3, 7), ("one_pixel_heads", 2): (0, 0)}
MARGIN = 1


# ---- A.4's schedule ----------------------------------------------------------------------------
def cosine(done: int, span: int) -> float:
    """The half cosine `done` steps into a decay of `span` steps."""
    return (1 + math.cos(math.pi * done / span)) / 2


# (total_steps, warmup, hold) -> {step: A.4's factor}
SCHEDULES = {
    (1000, 0.05, 0.0): {0: 1 / 50, 1: 2 / 50, 24: 25 / 50, 48: 49 / 50, 49: 1.0},  # w = 50 warm-up steps
    (1000, 0.05, 0.0, "cosine"): {50: 1.0, 51: cosine(1, 950), 525: 0.5, 998: cosine(948, 950),
                                  999: cosine(949, 950), 1000: 0.0, 1200: 0.0},
    (8, 0.25, 0.0): {0: 0.5, 1: 1.0, 2: 1.0, 3: (1 + math.sqrt(3) / 2) / 2, 4: 0.75, 5: 0.5, 6: 0.25,
                     7: (1 - math.sqrt(3) / 2) / 2, 8: 0.0},  # w = 2: all its steps
    (1000, 0.05, 0.1): {0: 0.0, 49: 0.0, 99: 0.0, 100: cosine(50, 950), 999: cosine(949, 950)},  # held 100
    (1000, 0.05, 0.02): {0: 0.0, 19: 0.0, 20: 21 / 50, 49: 1.0, 50: 1.0, 51: cosine(1, 950)},  # held 20
}


def schedule_error(key: tuple):
    """max |train.warmup_cosine(total_steps, warmup, hold)(step) - A.4's factor| over the table's steps."""
    total, warmup, hold = key[:3]

    def measure() -> float:
        factor = train.warmup_cosine(total, warmup, hold)
        return max(abs(float(factor(step)) - value) for step, value in SCHEDULES[key].items())
    return measure


# ---- one-pixel heads ---------------------------------------------------------------------------
def placed_layer(grid: tuple, centers: list, alpha: list) -> attention.SelfAttention2d:
    """A quadratic layer (float64) on `grid` with the heads placed: centers (row, col) and alpha."""
    torch.manual_seed(0)
    layer = attention.SelfAttention2d(4, heads=len(centers), grid=grid, encoding="quadratic").double()
    with torch.no_grad():
        layer.encoding.centers.copy_(torch.tensor(centers, dtype=torch.float64))
    layer.encoding.alpha = torch.tensor(alpha, dtype=torch.float64)
    return layer


# Each grid's heads: sharp ones (alpha 8) on a pixel, in a corner or past the border; a wide one
# (alpha 0.3); one between four pixels (0.25 on each); one of alpha 2 or 5 (0.62, 0.84 on its pixel).
# The central query is (3, 4) on the 6 x 8 grid and (2, 3) on the 5 x 7 grid.
PLACED = {
    (6, 8): ([[0, 0], [-3, -4], [2, 3], [1, -2], [0.4, -1.3], [0.5, 0.5], [-1, 2], [3, 0], [-2, 1]],
             [8, 8, 8, 8, 0.3, 8, 2, 8, 1]),
    (5, 7): ([[0, 0], [-2, -3], [2, 3], [1, -1], [-1, 2], [0.5, -0.5], [2, 0], [0, -3], [-0.2, 1.7]],
             [8, 8, 8, 8, 0.3, 8, 8, 8, 5]),
}
# Their one-pixel heads at mass 0.5 (and 0.7), by hand: the (3, 0) head past the 6 x 8 grid's
# bottom edge lands on its last row, shift (2, 0).
ONE_PIXEL = {
    ((6, 8), 0.5): {0: (0, 0), 1: (-3, -4), 2: (2, 3), 3: (1, -2), 6: (-1, 2), 7: (2, 0)},
    ((6, 8), 0.7): {0: (0, 0), 1: (-3, -4), 2: (2, 3), 3: (1, -2), 7: (2, 0)},
    ((5, 7), 0.5): {0: (0, 0), 1: (-2, -3), 2: (2, 3), 3: (1, -1), 6: (2, 0), 7: (0, -3), 8: (0, 2)},
}


def as_ints(values) -> tuple:
    """A shift or a pixel as a tuple of Python ints, or None where it is not one."""
    try:
        values = tuple(values)
    except TypeError:
        return None
    return values if all(type(v) is int for v in values) else None


def pixel_set(values) -> set:
    """The distinct tuples of Python ints among `values` (what is not one is left out)."""
    values = values if isinstance(values, (list, tuple, type({}.values()))) else ()
    return {p for p in map(as_ints, values) if p is not None}


def wrong_heads(found, expected: dict) -> int:
    """Heads whose one-pixel shift differs from `expected` {head: (row, col)}, missing or extra
    heads included; a value that is not a tuple of Python ints counts as wrong."""
    if not isinstance(found, dict):
        return len(expected) + 1
    given = {h: as_ints(v) for h, v in found.items()}
    return sum(given.get(h, "missing") != expected.get(h, "extra") for h in set(given) | set(expected))


def one_pixel_error(grid: tuple, mass: float):
    def measure() -> float:
        layer = placed_layer(grid, *PLACED[grid])
        found = measures.one_pixel_heads(layer) if mass == 0.5 else measures.one_pixel_heads(layer, mass)
        return wrong_heads(found, ONE_PIXEL[grid, mass])
    return measure


def uniform_heads_counted() -> float:
    """One-pixel heads of three uniform heads (alpha 0) on a 1 x 2 grid: exactly 0.5 on each key."""
    found = measures.one_pixel_heads(placed_layer((1, 2), [[0, 0], [0, -1], [0, 1]], [0, 0, 0]))
    return len(found)


# ---- nearest pixels ----------------------------------------------------------------------------
CENTERS = [[0.4, -0.4], [0.6, -0.6], [-1.7, 2.49], [-2.51, 1.2], [3.2, -3.8], [-0.3, 0.7], [1.49, -1.51], [0.0, 0.0]]
NEAREST = [(0, 0), (1, -1), (-2, 2), (-3, 1), (3, -4), (0, 1), (1, -2), (0, 0)]  # rounded by hand


def nearest_error() -> float:
    """Heads whose nearest pixel differs from the hand-rounded NEAREST, or is not a tuple of Python ints."""
    found = measures.nearest_pixels({"centers": CENTERS, "alpha": [0.5] * len(CENTERS)})
    found = list(found) if isinstance(found, (list, tuple)) else []
    return abs(len(found) - len(NEAREST)) + sum(as_ints(a) != b for a, b in zip(found, NEAREST))


# ---- the start's chance level ------------------------------------------------------------------
PIXELS = [(0, 0), (0, 1), (-1, 1), (2, -1), (3, 3), (0, 1)]  # (0, 1) twice: a pixel counts once


def scipy_held(pixels, heads: int, std: float) -> float:
    """sum over the distinct pixels of 1 - (1 - q_p)^heads, q_p = P(round(c) = p) from scipy's normal
    distribution function: P(round(x) = v) = Phi((v + 1/2) / std) - Phi((v - 1/2) / std) an axis."""
    axis = lambda v: norm.cdf((v + 0.5) / std) - norm.cdf((v - 0.5) / std)
    return float(sum(1 - (1 - axis(row) * axis(col)) ** heads for row, col in set(pixels)))


def drawn_held(pixels, heads: int, std: float, draws: int = 200_000) -> float:
    """The same, estimated from `draws` starts of seeded normal centers, each rounded to its pixel."""
    g = torch.Generator().manual_seed(0)
    nearest = (torch.randn(draws, heads, 2, generator=g, dtype=torch.float64) * std).round()  # [draws, heads, 2]
    return sum((nearest == torch.tensor(p, dtype=torch.float64)).all(-1).any(-1).double().mean().item()
               for p in set(pixels))


# ---- your run ----------------------------------------------------------------------------------
@functools.lru_cache(maxsize=2)
def read_run(run: str) -> tuple:
    """(the model now, the first heads.jsonl snapshot, the checkpoint's weights) of a run of day 3's
    command, read once for all the items (none changes them)."""
    if not run:
        raise Missing("no run given: train with day 3's command (exercises/day3_training.md), then add --run RUN_FOLDER")
    checkpoint, path = load_checkpoint(run)
    config = checkpoint["config"]
    differs = {k: config.get(k) for k, v in COMMAND.items() if config.get(k) != v}
    if differs:
        raise Missing(f"{run} is not a run of day 3's command: {differs}")
    if checkpoint["epoch"] < config["epochs"]:
        raise Missing(f"{run} has trained {checkpoint['epoch']} of {config['epochs']} epochs: resume it first")
    start = json.loads((path.parent / "heads.jsonl").read_text().splitlines()[0])
    return model_from_checkpoint(checkpoint).eval(), start, checkpoint["model"]


def float64_one_pixel(weights: dict, layer: int) -> dict:
    """{head: shift} of the heads putting at least 0.5 of the central query's probability on one key,
    from the checkpoint's centers and alpha by a float64 softmax of eq. 15 over the 16 x 16 grid."""
    prefix = f"blocks.{layer - 1}.attention.encoding."
    centers = weights[prefix + "centers"].double()  # [heads, 2]
    alpha = weights[prefix + "min_alpha"].double() + weights[prefix + "sqrt_2alpha"].double() ** 2 / 2
    H, W = GRID
    keys = torch.cartesian_prod(torch.arange(H), torch.arange(W)).double() - torch.tensor([H // 2, W // 2])
    logits = -alpha[:, None] * ((keys[None] - centers[:, None]) ** 2).sum(-1)  # [heads, H * W]
    best = logits.softmax(-1).max(-1)
    return {h: tuple(int(v) for v in keys[k].tolist())
            for h, (k, p) in enumerate(zip(best.indices.tolist(), best.values.tolist())) if p >= 0.5}


def day3_written():
    """Calls the day's functions the run items use, so that an unwritten one says so first."""
    measures.one_pixel_heads(placed_layer((1, 2), [[0, 0]], [0]))
    measures.nearest_pixels({"centers": [[0.0, 0.0]]})


def from_run(run: str, measure):
    """An item's measure on the run: measure(model, start, weights)."""
    def go() -> float:
        day3_written()
        return measure(*read_run(run))
    return go


def count(layer: int, at_start: bool = False):
    """How many one-pixel heads measures.one_pixel_heads finds in a layer of the run, now or at its start."""
    def measure(model, start, weights) -> float:
        found = model.attention_layers[layer - 1]
        return len(measures.one_pixel_heads(measures.layer_at(found, start["layers"][layer - 1]) if at_start
                                            else found))
    return measure


def disagreement(model, start, weights) -> float:
    """Heads where measures.one_pixel_heads and the float64 softmax differ, both layers."""
    return sum(wrong_heads(measures.one_pixel_heads(layer), float64_one_pixel(weights, i + 1))
               for i, layer in enumerate(model.attention_layers))


def start_held(model, start, weights) -> float:
    """Of layer 1's one-pixel pixels, how many the start held by measures.py, minus how many by the
    float64 softmax and Python's round of the start's centers: 0 when they agree."""
    found = measures.one_pixel_heads(model.attention_layers[0])
    yours = pixel_set(found.values() if isinstance(found, dict) else ()) & pixel_set(
        measures.nearest_pixels(start["layers"][0]))
    reference = {tuple(round(v) for v in c) for c in start["layers"][0]["centers"]}
    return len(yours) - len(set(float64_one_pixel(weights, 1).values()) & reference)


def items(run: str) -> list:
    band = lambda key: dict(reference=BANDS[key][0], high=BANDS[key][1], tol=MARGIN, test="in band")
    hint_warmup = ("the warm-up's first step, step 0, already trains: its factor is 1/w, not 0; its last, "
                   "step w - 1, reaches 1")
    hint_cosine = ("the cosine starts at 1 at step w, the first step after the warm-up, and reaches 0 at "
                   "step total_steps; count its steps from w")
    hint_pixel = ("a shift is key - query, (row, col), with the query at (H // 2, W // 2) as central_probs "
                  "reads it; on an even grid H // 2 is not (H - 1) // 2, and row = k // W for a non-square grid")
    hint_run = "outside the band of the committed runs: is it day 3's command, run to its end?"
    checks = [
        Item("train.warmup_cosine(1000, 0.05): the warm-up's steps 0, 1, 24, 48, 49 against A.4 (max error)",
             schedule_error((1000, 0.05, 0.0)), 0.0, 1e-12, hint_warmup),
        Item("train.warmup_cosine(1000, 0.05): the cosine's steps 50, 51, 525, 998, 999, 1000, 1200 (max error)",
             schedule_error((1000, 0.05, 0.0, "cosine")), 0.0, 1e-12, hint_cosine),
        Item("train.warmup_cosine(8, 0.25): every step 0-8, 2 of them warm-up (max error)",
             schedule_error((8, 0.25, 0.0)), 0.0, 1e-12, hint_warmup + "; " + hint_cosine),
        Item("train.warmup_cosine(1000, 0.05, hold=0.1): 0 for 100 steps, then the cosine's value (max error)",
             schedule_error((1000, 0.05, 0.1)), 0.0, 1e-12,
             "hold is a fraction of the steps: the factor is 0 before step round(hold * total_steps), and the "
             "schedule's own value from there on (the cosine does not restart)"),
        Item("train.warmup_cosine(1000, 0.05, hold=0.02): 0 for 20 steps, then the warm-up's value (max error)",
             schedule_error((1000, 0.05, 0.02)), 0.0, 1e-12,
             "after the hold, step 20 takes the warm-up's value at step 20, 21/50"),
        Item("measures.one_pixel_heads on a 6 x 8 grid (even, not square), nine placed heads: wrong heads",
             one_pixel_error((6, 8), 0.5), 0, 0, hint_pixel),
        Item("measures.one_pixel_heads on a 5 x 7 grid (odd, not square), nine placed heads: wrong heads",
             one_pixel_error((5, 7), 0.5), 0, 0, hint_pixel),
        Item("measures.one_pixel_heads(layer, mass=0.7) on the 6 x 8 grid: wrong heads",
             one_pixel_error((6, 8), 0.7), 0, 0, "use the `mass` given: a head of 0.62 on its pixel counts at 0.5, "
                                                 "not at 0.7"),
        Item("measures.one_pixel_heads: three uniform heads on a 1 x 2 grid, exactly 0.5 on each key, all count",
             uniform_heads_counted, 3, 0, "at least `mass` counts: >=, not >"),
        Item("measures.nearest_pixels on 8 centers, negative ones too, against their rounding by hand: wrong heads",
             nearest_error, 0, 0, "the nearest integer, also below 0: int() truncates toward 0 (int(-1.7) = -1), "
                                  "floor goes down (floor(-0.4) = -1, where the nearest is 0); "
                                  "return tuples of Python ints"),
        Item("measures.fresh_start_held(6 pixels, 9 heads, std 1.414) against scipy's normal distribution function",
             lambda: measures.fresh_start_held(PIXELS, 9, 1.414), scipy_held(PIXELS, 9, 1.414), 1e-12,
             "the normal's mass in [v - 1/2, v + 1/2] is Phi((v + 1/2) / std) - Phi((v - 1/2) / std), and "
             "Phi(x) = (1 + erf(x / sqrt 2)) / 2: mind the sqrt 2; a pixel given twice counts once"),
        Item("measures.fresh_start_held(4 pixels, 3 heads, std 0.7) against scipy's normal distribution function",
             lambda: measures.fresh_start_held([(0, 0), (1, 0), (-1, -1), (0, -2)], 3, 0.7),
             scipy_held([(0, 0), (1, 0), (-1, -1), (0, -2)], 3, 0.7), 1e-12,
             "a pixel is held when at least one of the heads lands on it: 1 - (1 - q)^heads, not heads * q"),
        Item("measures.fresh_start_held(6 pixels, 9 heads, std 2) against 200,000 drawn starts",
             lambda: measures.fresh_start_held(PIXELS, 9, 2.0), drawn_held(PIXELS, 9, 2.0), 0.01,
             "std is the standard deviation of each coordinate, not its variance; both axes count"),
        Item("your run: layer 1's one-pixel heads at step 0 (heads.jsonl's start)",
             from_run(run, count(1, at_start=True)), 0, 0,
             "at the start every alpha is about 0.5: no head reaches half its probability on one pixel"),
        Item("your run: layer 1's one-pixel heads after 1,000 steps, band of the committed runs",
             from_run(run, count(1)), hint=hint_run, **band(("one_pixel_heads", 1))),
        Item("your run: layer 2's one-pixel heads after 1,000 steps, band of the committed runs",
             from_run(run, count(2)), hint=hint_run, **band(("one_pixel_heads", 2))),
        Item("your run: heads where measures.one_pixel_heads and a float64 softmax of its heads differ, both layers",
             from_run(run, disagreement), 0, 0, "compare with the placed heads' items above"),
        Item("your run: layer 1's pixels its start held, measures.py's count minus Python's round's",
             from_run(run, start_held), 0, 0, "a pixel is held when it is some head's nearest pixel at step 0"),
    ]
    return checks
