"""How convolution-like a trained attention layer is, and how far its heads travelled.

Every measure here is ours: the paper shows its heads in figures and counts nothing.

    from measures import measures, origins
    measures(layer)   # {"locality_3x3": 0.81, "one_pixel": 7, "ring": 5, "sides": 4, ...}

The measures of probability look at the central query of the grid, as the paper's figures do
(overlap alone averages over every query). They describe the attention layer, SelfAttention2d: in
the network a Linear shared by all heads follows it (model.Block's attention_out), which they leave out.
- locality_3x3, locality_5x5: the share of the query's kernel energy inside a 3x3 (5x5)
  window: the layer is a convolution (the converse of Theorem 1, prove.attention_to_conv) whose
  kernel at each shift sums the heads' value maps W^(h) weighted by their probabilities; 1.0
  for a 3x3 (5x5) convolution. It weighs each head by its value map: a head with small W^(h)
  counts little.
- mass_3x3, mass_5x5: the heads' probability inside the 3x3 and 5x5 windows around the query,
  averaged over the heads, every head alike whatever its value map; distance: their centers'
  mean distance from the query (heads with centers).
- one_pixel_heads: how many heads put at least half of the query's probability on one pixel
  (Lemma 1's heads each sit on one shift); one_pixel: how many distinct pixels those heads sit
  on (two heads on one pixel count once); ring, sides, inside_3x3, inside_5x5: where those
  pixels lie.
- coverage: distinct integer shifts that hold such a head's center (heads with centers).
- overlap: how alike the heads' probabilities are (train.py's --overlap penalizes it).
- origins: against the start (heads.jsonl epoch 0), how far each head's center travelled, and how
  many one-pixel heads travelled 1 px or more: a grid that training found, not one the start
  placed; where the one-pixel heads' pixels came from: how many were already a head's nearest
  pixel at the start, and how far apart heads sharing a pixel began; each count beside its
  chance level (another start, or the start's pixels permuted).
- path_length: how far the centers wandered, step to step, beside their net travel.
"""
import copy
import math

import torch
from torch import nn

from attention import SelfAttention2d

ONE_PIXEL = 0.5  # a head is one-pixel when it puts at least this much probability on one key
WIDE = 0.2  # a quadratic head is wide, near a global average, when its alpha falls below this
SHARP = 1.0  # and sharp at or above this: its Gaussian's std 1 / sqrt(2 alpha) at most 0.71 px


def central_probs(layer: SelfAttention2d, x: torch.Tensor = None) -> torch.Tensor:
    """The central query's probabilities over the keys, P[h, q, :] at q = (H//2, W//2): [heads, H, W].
    A content layer needs its input x [1, H, W, D]; the measures below refuse content layers."""
    H, W = layer.grid
    with torch.no_grad():
        P = layer.attention_probs(x)
    P = P[0] if P.dim() == 4 else P  # content: the first image's
    return P[:, (H // 2) * W + W // 2].view(-1, H, W)


def locality(layer: SelfAttention2d, size: int) -> float:
    """Share of the central query's kernel energy inside the size x size window around it.

    By the converse of Theorem 1 the query's output is sum_delta x_{q+delta} M(delta) with
    M(delta) = sum_h p_h(delta) W^(h); its energy ||M(delta)||_F^2 = p(delta)^T G p(delta) uses
    the Gram matrix G[h, h'] = <W^(h), W^(h')>_F. 1.0 for a size x size convolution; a uniform
    layer gives the window's share of the grid.
    """
    p = central_probs(layer).double()  # [heads, H, W]
    maps = layer.W_out.weight.detach().double().view(-1, layer.heads, layer.dim).transpose(0, 1).flatten(1)  # W^(h)
    energy = torch.einsum("hab,hg,gab->ab", p, maps @ maps.T, p)  # [H, W]
    return (window(energy, size).sum() / energy.sum()).item()


def window(t: torch.Tensor, size: int) -> torch.Tensor:
    """The size x size window of t [..., H, W] around the central query (H//2, W//2), cut at the borders."""
    H, W = t.shape[-2:]
    r, c = H // 2 - size // 2, W // 2 - size // 2
    return t[..., max(r, 0):r + size, max(c, 0):c + size]


def grid_coverage(layer: SelfAttention2d, radius: float = 0.25, mass: float = ONE_PIXEL) -> int:
    """Distinct integer shifts that hold a head's center within `radius` pixels, that head
    putting at least `mass` of the central query's probability on that one pixel (a head of
    Lemma 1). For encodings with centers (quadratic, gaussian)."""
    if not hasattr(layer.encoding, "centers"):
        raise ValueError(f"{layer.encoding_name} heads have no centers")
    p = central_probs(layer)
    H, W = layer.grid
    shifts = set()
    for h, center in enumerate(layer.encoding.centers.detach().tolist()):
        nearest = [round(c) for c in center]
        row, col = H // 2 + nearest[0], W // 2 + nearest[1]
        close = math.dist(center, nearest) <= radius
        if close and 0 <= row < H and 0 <= col < W and p[h, row, col] >= mass:
            shifts.add(tuple(nearest))
    return len(shifts)


def one_pixel_heads(layer: SelfAttention2d, mass: float = ONE_PIXEL) -> dict:
    """The one-pixel heads: {head: the shift (row, col) of its pixel} for every head that puts at
    least `mass` (inclusive) of the central query's probability on one key.

    The central query is the pixel (H // 2, W // 2) of the layer's H x W grid, the one
    `central_probs(layer)` reads: its probabilities [heads, H, W] over the keys. A shift is
    key - query, as in attention.py: (-1, 0) is the pixel above the query. Python ints."""
    p = central_probs(layer)  # [heads, H, W]
    H, W = layer.grid
    best = p.flatten(1).max(1)
    return {h: (k // W - H // 2, k % W - W // 2)
            for h, (k, v) in enumerate(zip(best.indices.tolist(), best.values.tolist())) if v >= mass}


def around_query(layer: SelfAttention2d, mass: float = ONE_PIXEL) -> dict:
    """Where the one-pixel heads lie around the central query, for any position-only encoding.
    `one_pixel_heads`: how many heads are one-pixel; `one_pixel`: the distinct pixels they sit
    on; `ring`: how many of the 8 pixels of the 3x3 ring around the query hold one (8 for a
    3x3 convolution); `sides`: on how many of the four sides (above, below, left, right: rows
    or columns beyond the query's) one lies; `inside_3x3`, `inside_5x5`: how many of those
    pixels lie in the 3x3 (the query and its ring) and 5x5 windows around the query."""
    heads = one_pixel_heads(layer, mass)
    shifts = set(heads.values())  # delta = key - query
    ring = sum(max(abs(dr), abs(dc)) == 1 for dr, dc in shifts)
    sides = [any(dr < 0 for dr, _ in shifts), any(dr > 0 for dr, _ in shifts),
             any(dc < 0 for _, dc in shifts), any(dc > 0 for _, dc in shifts)]
    inside = {size: sum(max(abs(dr), abs(dc)) <= size // 2 for dr, dc in shifts) for size in (3, 5)}
    return {"one_pixel_heads": len(heads), "one_pixel": len(shifts), "ring": ring, "sides": sum(sides),
            "inside_3x3": inside[3], "inside_5x5": inside[5]}


def window_mass(layer: SelfAttention2d, size: int) -> float:
    """The central query's probability inside the size x size window around it, averaged over
    the heads: 1.0 when every head attends inside it, the window's share of the grid when
    every head is uniform."""
    return window(central_probs(layer), size).sum((1, 2)).mean().item()  # [heads, size, size] -> a number


def center_distance(layer: SelfAttention2d) -> float:
    """The heads' mean distance from the query in pixels: the mean norm of their centers."""
    return layer.encoding.centers.detach().norm(dim=1).mean().item()


def head_overlap(layer: SelfAttention2d) -> torch.Tensor:
    """How alike the heads' probabilities are: with G[h, g] = sum_k P_h[q, k] P_g[q, k]
    averaged over the queries q, the cosine G[h, g] / sqrt(G[h, h] G[g, g]) averaged over the
    pairs of distinct heads of a position-only layer. 1 when the heads are alike (uniform
    heads included), 0 when each attends where no other does; two quadratic heads of width
    alpha whose centers lie d pixels apart give exp(-alpha d^2 / 2) away from the borders.
    Differentiable: a scalar tensor."""
    if hasattr(layer, "axis_probs") and layer.encoding.separable:  # a layer with P_h = P_h^row (x) P_h^col
        p_row, p_col = layer.axis_probs()  # (the fast layer): the sum over (query, key) pairs factorizes too
        gram = torch.einsum("hqk,gqk->hg", p_row, p_row) * torch.einsum("hqk,gqk->hg", p_col, p_col)
    else:
        P = layer.attention_probs()  # [heads, T, T]
        gram = torch.einsum("hqk,gqk->hg", P, P)  # [heads, heads]
    norm = gram.diagonal().sqrt()
    cosine = gram / (norm[:, None] * norm[None, :])
    heads = gram.shape[0]
    return (cosine.sum() - cosine.diagonal().sum()) / max(heads * (heads - 1), 1)


def measures(layer: SelfAttention2d) -> dict:
    """Locality in the 3x3 and 5x5 windows, the one-pixel heads around the query, the heads'
    probability inside those windows, their overlap and, for heads with centers, grid coverage
    and their distance from the query."""
    found = {"locality_3x3": locality(layer, 3), "locality_5x5": locality(layer, 5)} | around_query(layer)
    found |= {"mass_3x3": window_mass(layer, 3), "mass_5x5": window_mass(layer, 5)}
    with torch.no_grad():
        found["overlap"] = head_overlap(layer).item()
    if hasattr(layer.encoding, "centers"):
        found |= {"coverage": grid_coverage(layer), "distance": center_distance(layer)}
    return found


def layer_measures(model: nn.Module) -> list:
    """`measures` of every attention layer of a model (None for a content layer: no fixed kernel)."""
    return [None if layer.content else measures(layer) for layer in getattr(model, "attention_layers", [])]


# ---- travel: from the heads.jsonl snapshots of a run -----------------------------------------

def layer_at(layer: SelfAttention2d, snapshot: dict) -> SelfAttention2d:
    """A copy of the layer with a heads.jsonl snapshot's centers and alpha (or Sigma^-1)."""
    layer = copy.deepcopy(layer)
    with torch.no_grad():
        layer.encoding.centers.copy_(torch.tensor(snapshot["centers"]))
        if "alpha" in snapshot:
            layer.encoding.alpha = torch.tensor(snapshot["alpha"])
        else:  # any S with S S^T = Sigma^-1 gives the same head: the symmetric square root
            eigenvalues, vectors = torch.linalg.eigh(torch.tensor(snapshot["inv_cov"]))
            layer.encoding.inv_cov_sqrt.copy_(vectors * eigenvalues.clamp(min=0).sqrt()[..., None, :])
    return layer


def layer_travel(model: nn.Module, snapshots: list, center_std: float) -> list:
    """`origins` of every layer with centers, from the first to the last
    heads.jsonl snapshot (records.head_snapshot; None for a layer without centers), with
    `path_mean`, the heads' mean path over the snapshots (path_length), and
    `already_nearest_chance`, what a fresh start of the run's `center_std` holds
    (fresh_start_held)."""
    found = []
    for layer, seen in zip(model.attention_layers, zip(*(s["layers"] for s in snapshots))):  # a layer's snapshots
        if "centers" not in seen[0]:
            found.append(None)
            continue
        heads = len(seen[0]["centers"])
        moved = origins(layer, seen[0], seen[-1])
        found.append(moved | {"path_mean": sum(path_length(seen)) / heads,
                              "already_nearest_chance": fresh_start_held(moved["pixels"], heads, center_std)})
    return found


def nearest_pixels(start: dict) -> list:
    """Each head's nearest pixel at a snapshot: the integer shift (row, col) nearest to its center.
    start: a layer's snapshot of heads.jsonl, {"centers": [[row, col], ...] one a head, ...}.
    Returns [(row, col), ...] in head order, Python ints; a coordinate halfway between two integers
    goes to the even one, as Python's round and torch.round take it."""
    return [tuple(int(v) for v in c) for c in torch.tensor(start["centers"]).round().tolist()]


def origins(layer: SelfAttention2d, start: dict, now: dict) -> dict:
    """Between the start's snapshot and `now` (heads.jsonl or steps.jsonl heads with centers).

    How far the heads went: `travel`, each head's net distance |c_now - c_start| (px), its mean
    `travel_mean` and largest `travel_max`, `travel_one_pixel` its mean over the heads one-pixel
    now (None: none) and `travelled` how many of those moved a pixel or more; their
    median `alpha` now, `wide` and `sharp`, how many have alpha below WIDE and at least SHARP, and
    `sharp_began_nearest`, how many of those k sharp heads were among the k that began nearest the
    query, against `sharp_began_nearest_chance` = k^2 / heads, its mean for k heads drawn at random
    (all None for Gaussian heads).
    What the start held: `start_pixels`, the distinct pixels nearest to the start's centers;
    the one-pixel heads now, `pixels` their distinct pixels (`one_pixel` of them), of which
    `already_nearest` were some head's nearest pixel at the start; `own_start` the heads on
    their own start's nearest pixel, and `own_start_chance` its expectation were the start's
    pixels dealt to the heads at random (a uniform permutation: exact); `shared` the pixels two
    or more of them hold and `shared_start_gap` the mean start distance (px) between heads that
    share one (None: none shared). The chance level of `already_nearest` needs another start:
    `held(pixels, nearest_pixels(other_start))` (lab/experiments.py: another seed's), or its expectation
    over fresh starts, `fresh_start_held` (visualize.py)."""
    begun = torch.tensor(start["centers"])  # [heads, 2]
    nearest = nearest_pixels(start)
    on_pixel = one_pixel_heads(layer_at(layer, now))  # {head: its pixel}
    holders = {}
    for h, pixel in on_pixel.items():
        holders.setdefault(pixel, []).append(h)
    gaps = [(begun[a] - begun[b]).norm().item() for heads in holders.values() if len(heads) > 1
            for i, a in enumerate(heads) for b in heads[i + 1:]]
    moved = (torch.tensor(now["centers"]) - begun).norm(dim=1)  # [heads]
    spreads = dict.fromkeys(("alpha", "wide", "sharp", "sharp_began_nearest", "sharp_began_nearest_chance"))
    if "alpha" in now:  # quadratic heads
        sharp = [h for h, a in enumerate(now["alpha"]) if a >= SHARP]
        began_nearest = begun.norm(dim=1).argsort(stable=True)[:len(sharp)].tolist()  # the k nearest the query
        spreads = dict(alpha=torch.tensor(now["alpha"]).median().item(), wide=sum(a < WIDE for a in now["alpha"]),
                       sharp=len(sharp), sharp_began_nearest=len(set(sharp) & set(began_nearest)),
                       sharp_began_nearest_chance=len(sharp) ** 2 / len(begun))
    return spreads | {"travel": [round(d, 4) for d in moved.tolist()], "travel_mean": moved.mean().item(),
                       "travel_max": moved.max().item(), "travelled": sum(moved[h].item() >= 1 for h in on_pixel),
                       "travel_one_pixel": moved[list(on_pixel)].mean().item() if on_pixel else None,
                       "start_pixels": len(set(nearest)), "pixels": sorted(holders), "one_pixel": len(holders),
                       "already_nearest": held(holders, nearest),
                       "own_start": sum(nearest[h] == pixel for h, pixel in on_pixel.items()),
                       "own_start_chance": sum(nearest.count(pixel) for pixel in on_pixel.values()) / len(nearest),
                       "shared": sum(len(heads) > 1 for heads in holders.values()),
                       "shared_start_gap": sum(gaps) / len(gaps) if gaps else None}


def held(pixels, nearest: list) -> int:
    """How many of the distinct `pixels` are among a start's `nearest` pixels."""
    return len(set(pixels) & set(nearest))


def fresh_start_held(pixels, heads: int, center_std: float) -> float:
    """How many of the distinct `pixels` (row, col) a fresh start holds on average: the exact
    chance level of `already_nearest`. A pixel given twice counts once.

    A fresh start draws each of the `heads` centers c from N(0, center_std^2 I), independently.
    A pixel p is some head's nearest with probability 1 - (1 - q_p)^heads, where q_p =
    P(round(c) = p) is a product over the two axes of the normal's mass in [p - 1/2, p + 1/2].
    math.erf is the error function, erf(x) = 2 / sqrt(pi) * (the integral of exp(-t^2) from 0 to x)."""
    scale = center_std * math.sqrt(2)
    mass = lambda v: 0.5 * (math.erf((v + 0.5) / scale) - math.erf((v - 0.5) / scale))
    return sum(1 - (1 - mass(row) * mass(col)) ** heads for row, col in set(pixels))


def fresh_start_tail(pixel_sets: list, heads: int, center_std: float, observed: int, draws: int = 100_000) -> float:
    """The chance that fresh starts hold at least `observed` of the pixels, summed over the sets
    (one a seed, each against a start of its own): the tail beside `fresh_start_held`'s mean,
    from `draws` starts of `heads` centers drawn from N(0, std^2 I) (a fixed seed)."""
    g = torch.Generator().manual_seed(0)
    total = torch.zeros(draws)
    for pixels in pixel_sets:
        nearest = (torch.randn(draws, heads, 2, generator=g) * center_std).round()  # [draws, heads, 2]
        for pixel in set(pixels):
            total += (nearest == torch.tensor(pixel, dtype=torch.float32)).all(-1).any(-1).float()
    return (total >= observed).float().mean().item()


def path_length(snapshots: list) -> list:
    """Each head's path in pixels over a sequence of snapshots (centers): the distances from
    one snapshot to the next, summed. Beside the net travel it says how much the centers
    wandered: a head that jitters in place has a long path and a short travel."""
    centers = torch.tensor([s["centers"] for s in snapshots])  # [snapshots, heads, 2]
    return (centers[1:] - centers[:-1]).norm(dim=2).sum(0).tolist()
