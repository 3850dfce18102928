"""Day 3: training, and where the heads go. Write the four functions below, then check them:

    python -m exercises.check 3 --run runs/day3

Section 4 and Appendix A.4 of the paper; train.py's loop, measures.py's counts. The check
holds your functions to independent references (closed forms, measures.py) and reads your
run: see exercises/day3_training.md.
"""
import torch


def warmup_cosine(step: int, total_steps: int, warmup: float = 0.05) -> float:
    """A.4's learning-rate factor at `step` (0-based), stepped every batch: linear warm-up over
    w = max(1, round(warmup * total_steps)) steps, from 1/w at step 0 to 1 at step w - 1, then a
    cosine from 1 at step w down to 0 at step `total_steps` and 0 after it:
    0.5 * (1 + cos(pi * min(1, (step - w) / max(1, total_steps - w))))."""
    raise NotImplementedError


def one_pixel_heads(P: torch.Tensor, mass: float = 0.5) -> dict:
    """The heads that put at least `mass` of the central query's probability on one key.

    P: [heads, H, W], each head's probabilities over the keys for the central query
    q = (H // 2, W // 2) (measures.central_probs gives them for a layer). Returns
    {head: (row, col)}, the key's shift delta = key - query of each such head (Lemma 1's heads
    each sit on one shift)."""
    raise NotImplementedError


def nearest_pixels(centers: torch.Tensor) -> list:
    """Each head's nearest integer shift (row, col) to its center: centers [heads, 2] ->
    [(row, col), ...] as Python ints (the pixel a head starts "on"). A tensor here, where
    measures.nearest_pixels takes a heads.jsonl snapshot; a coordinate halfway between two
    pixels goes to the even one, as torch.round does."""
    raise NotImplementedError


def fresh_start_held(pixels, heads: int, center_std: float) -> float:
    """The chance level of "the start held these pixels": how many of the distinct `pixels`
    (row, col) a fresh start holds on average, where a start draws `heads` centers from
    N(0, center_std^2 I) and holds the nearest pixel of each. A pixel p is held with probability
    1 - (1 - q_p)^heads, q_p = P(round(c) = p), the product over the two axes of the normal's
    mass in [p - 1/2, p + 1/2] (math.erf gives the normal's distribution function)."""
    raise NotImplementedError
