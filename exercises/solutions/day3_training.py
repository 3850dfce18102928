"""Day 3's reference solutions (the stubs and their docstrings: exercises/day3_training.py)."""
import math

import torch


def warmup_cosine(step: int, total_steps: int, warmup: float = 0.05) -> float:
    """A.4's warm-up, then cosine to 0."""
    w = max(1, round(warmup * total_steps))
    if step < w:
        return (step + 1) / w
    return 0.5 * (1 + math.cos(math.pi * (step - w) / (total_steps - w)))


def one_pixel_heads(P: torch.Tensor, mass: float = 0.5) -> dict:
    """{head: shift of its key} for the heads with `mass` on one key."""
    heads, H, W = P.shape
    best, key = P.flatten(1).max(1)  # [heads], [heads]
    return {h: (int(key[h]) // W - H // 2, int(key[h]) % W - W // 2) for h in range(heads) if best[h] >= mass}


def nearest_pixels(centers: torch.Tensor) -> list:
    """Each center rounded to its pixel."""
    return [(int(r), int(c)) for r, c in centers.round().tolist()]


def fresh_start_held(pixels, heads: int, center_std: float) -> float:
    """Expected pixels held by a fresh start."""
    def axis(v):  # P(round(x) = v) for x ~ N(0, center_std^2)
        return 0.5 * (math.erf((v + 0.5) / (center_std * math.sqrt(2))) - math.erf((v - 0.5) / (center_std * math.sqrt(2))))
    return sum(1 - (1 - axis(r) * axis(c)) ** heads for r, c in set(pixels))
