"""Day 2's items: the network's shapes, counts and factorized softmax, held to the project's model and the paper.

    python -m exercises.check 2                # exercises/day2_network.py
    python -m exercises.check 2 --solutions    # exercises/solutions/day2_network.py

References: model.space_to_depth and a literal array; model.count_parameters and model.paper_flops
of model.build_model's networks; the paper's Tables 1-2; eq. 9's softmax written out densely in
float64; attention.FastSelfAttention2d's probabilities (its row and column softmaxes). Seeded
inputs, float64 where values are compared, so every CPU gives the same verdicts.
"""
import torch

import model
from attention import FastSelfAttention2d, SelfAttention2d
from exercises.check import Item

# exercises/day2_network.py: the four functions of the day, and the factorized softmax as a stretch goal
WRITE = ("space_to_depth", "attention_parameters", "network_parameters", "paper_flops")
STRETCH = ("separable_probs",)

SMALL = dict(layers=2, heads=4, dim=64, ffn_dim=96)  # a width-64 network, as a CPU trains it


def max_error(yours: torch.Tensor, reference: torch.Tensor) -> float:
    """max |yours - reference| in float64; a shape that differs is said, not broadcast."""
    if tuple(yours.shape) != tuple(reference.shape):
        raise ValueError(f"shape {list(yours.shape)}, expected {list(reference.shape)}")
    return (yours.double() - reference.double()).abs().max().item()


def space_to_depth_error(shape: tuple):
    """max |space_to_depth - model.space_to_depth| on a seeded batch of `shape`."""
    def measure(yours) -> float:
        images = torch.randn(*shape, generator=torch.Generator().manual_seed(0))
        return max_error(yours.space_to_depth(images), model.space_to_depth(images))
    return measure


def hand_case_error(yours) -> float:
    """A 4 x 4 one-color image of 0..15: each token lists its block's pixels row-major."""
    image = torch.arange(16.0).view(1, 1, 4, 4)
    expected = torch.tensor([[[[0, 1, 4, 5], [2, 3, 6, 7]],
                              [[8, 9, 12, 13], [10, 11, 14, 15]]]], dtype=torch.float64)  # [1, 2, 2, 4]
    return max_error(yours.space_to_depth(image), expected)


def model_count(encoding: str, **overrides) -> int:
    return model.count_parameters(model.build_model(encoding, **overrides))


def eq9_probs(centers: torch.Tensor, alpha: torch.Tensor, H: int, W: int) -> torch.Tensor:
    """softmax over keys of -alpha ||(k - q) - Delta||^2 over the full H x W grid, float64: [heads, T, T]."""
    pos = torch.cartesian_prod(torch.arange(H), torch.arange(W)).double()  # [T, 2] row-major
    delta = pos[None, :, :] - pos[:, None, :]  # [T, T, 2]: key - query
    logits = -alpha[:, None, None] * ((delta[None] - centers[:, None, None, :]) ** 2).sum(-1)  # [heads, T, T]
    return logits.softmax(-1)


def dense_error(yours) -> float:
    """max |separable_probs - eq. 9's dense softmax|, 4 heads on a 5 x 7 grid."""
    g = torch.Generator().manual_seed(1)
    centers = 2 * torch.randn(4, 2, generator=g, dtype=torch.float64)
    alpha = 0.1 + 2 * torch.rand(4, generator=g, dtype=torch.float64)
    return max_error(yours.separable_probs(centers, alpha, 5, 7), eq9_probs(centers, alpha, 5, 7))


def fast_layer_error(yours) -> float:
    """max |separable_probs - FastSelfAttention2d's P_row (x) P_col|, 6 x 4 grid, one head sharp and off the grid."""
    layer = FastSelfAttention2d(8, heads=3, grid=(6, 4), encoding="quadratic").double()
    with torch.no_grad():
        layer.encoding.centers.copy_(torch.tensor([[0.5, -1.0], [-2.3, 1.7], [9.0, -7.0]]))
    layer.encoding.alpha = torch.tensor([0.4, 3.0, 400.0], dtype=torch.float64)  # head 2: every logit -12,800 or less
    centers, alpha = layer.encoding.centers.detach(), layer.encoding.alpha.detach()
    with torch.no_grad():
        return max_error(yours.separable_probs(centers, alpha, 6, 4), layer.attention_probs())


def items(run: str) -> list:
    hint_block = ("per block: the attention layer, Linear(dim, dim) after it, two LayerNorms (weight and bias, "
                  "dim each), the FFN Linear(dim, ffn_dim) and Linear(ffn_dim, dim); plus Linear(12, dim) and "
                  "Linear(dim, 10); every Linear has a bias (model.py's Block and SelfAttentionNet)")
    hint_attention = ("W_out = Linear(heads * dim, dim): heads * dim * dim weights and dim biases; gaussian heads "
                      "hold 2 + 4 numbers each; learned: two tables of 31 x dim a layer, and v_row, v_col "
                      "(dim each) a head (attention.RowColumn)")
    hint_flops = ("2 x multiply-adds; Linear(n_in, n_out) on n vectors is n * n_in * n_out; every token passes "
                  "Linear(12, dim), W_out (heads * dim -> dim), Linear(dim, dim) and the FFN; the classifier "
                  "acts once, on the mean token; P_h X is not counted")
    checks = [
        Item("space_to_depth = model.space_to_depth on a random [4, 3, 32, 32] batch",
             space_to_depth_error((4, 3, 32, 32)), 0.0, 0.0,
             "out [B, 16, 16, 12] (channels last); channel (2 * di + dj) * 3 + c: the block's pixel outer, "
             "the color inner (model.space_to_depth's permute(0, 2, 4, 3, 5, 1)); if the hand case passes, "
             "the colors are the outer index"),
        Item("space_to_depth of a 4x4 image of 0..15 = [[[0,1,4,5],[2,3,6,7]],[[8,9,12,13],[10,11,14,15]]]",
             hand_case_error, 0.0, 0.0,
             "token (i, j) holds pixels (2i, 2j), (2i, 2j+1), (2i+1, 2j), (2i+1, 2j+1) in that order: "
             "the first token is 0, 1, 4, 5, not 0, 4, 1, 5 (a transpose) nor 0, 1, 2, 3 (a plain reshape)"),
        Item("space_to_depth = model.space_to_depth on a random [2, 3, 6, 10] batch (H != W)",
             space_to_depth_error((2, 3, 6, 10)), 0.0, 0.0,
             "out [B, H/2, W/2, 4C]: rows (H) before columns (W) in every view, reshape and permute; "
             "a square image hides a swap of H and W"),
    ]
    # Exact counts are checked as (yours - the project's): the value printed is what is missing or extra.
    for encoding in ("gaussian", "learned"):
        n = model.count_parameters(SelfAttention2d(400, 9, encoding=encoding))
        checks.append(Item(f"attention_parameters(400, 9, {encoding}) - attention.SelfAttention2d's count ({n:,})",
                           lambda yours, e=encoding, n=n: yours.attention_parameters(400, 9, e) - n, 0, 0,
                           hint_attention))
    for encoding in ("quadratic", "gaussian", "learned"):
        n = model_count(encoding)
        checks.append(Item(f"network_parameters({encoding}) - model.count_parameters(model.build_model({encoding!r})) "
                           f"({n:,})", lambda yours, e=encoding, n=n: yours.network_parameters(e) - n, 0, 0,
                           hint_block))
    for encoding, paper in (("quadratic", 12.1), ("learned", 12.3)):  # the Gaussian model's 12.1M is Table 2's
        checks.append(Item(f"network_parameters({encoding}) in millions = Table 1's {paper}M to its rounding",
                           lambda yours, e=encoding: yours.network_parameters(e) / 1e6, paper, 0.05,
                           "6 layers, 9 heads, dim 400, ffn_dim 512 by default; " + hint_block))
    n_small, n_pruned = model_count("learned", **SMALL), model_count("gaussian", heads=model.PRUNED_HEADS)
    checks += [
        Item(f"network_parameters(learned, layers=2, heads=4, dim=64, ffn_dim=96) - model's count ({n_small:,})",
             lambda yours: yours.network_parameters("learned", **SMALL) - n_small, 0, 0,
             "the learned tables are dim wide (not 400) and there is one pair a layer; " + hint_block),
        Item(f"network_parameters(gaussian, heads={model.PRUNED_HEADS}) - model's count of the pruned network "
             f"({n_pruned:,})",
             lambda yours: yours.network_parameters("gaussian", heads=model.PRUNED_HEADS) - n_pruned, 0, 0,
             "each layer's heads from the list: a pruned head takes its dim x dim block of W_out and its 6 "
             "positional numbers with it; W_out's bias (dim) stays"),
        Item("network_parameters(gaussian, pruned) in millions = Table 2's 9.7M to its rounding",
             lambda yours: yours.network_parameters("gaussian", heads=model.PRUNED_HEADS) / 1e6, 9.7, 0.05,
             "15 heads pruned of 54: about 15 x 400 x 400 parameters fewer than 12.1M"),
    ]
    f_full = model.paper_flops(model.build_model("quadratic"))
    f_pruned = model.paper_flops(model.build_model("gaussian", heads=model.PRUNED_HEADS))
    f_small = model.paper_flops(model.build_model("quadratic", image_size=16, **SMALL), image_size=16)
    checks += [
        Item(f"paper_flops() - model.paper_flops(model.build_model('quadratic')) ({f_full:,})",
             lambda yours: yours.paper_flops() - f_full, 0, 0, hint_flops),
        Item("paper_flops() in billions = Table 1's 6.2B to its rounding",
             lambda yours: yours.paper_flops() / 1e9, 6.2, 0.05, hint_flops),
        Item(f"paper_flops(heads={model.PRUNED_HEADS}) - model.paper_flops of the pruned network ({f_pruned:,})",
             lambda yours: yours.paper_flops(heads=model.PRUNED_HEADS) - f_pruned, 0, 0,
             "each layer's W_out costs tokens * heads * dim * dim multiply-adds with its own heads; " + hint_flops),
        Item("paper_flops(heads=pruned) in billions = Table 2's 4.9B to its rounding",
             lambda yours: yours.paper_flops(heads=model.PRUNED_HEADS) / 1e9, 4.9, 0.05, hint_flops),
        Item(f"paper_flops(64, 96, 4, 2, tokens=64) - model.paper_flops of it on 16x16 images ({f_small:,})",
             lambda yours: yours.paper_flops(64, 96, 4, 2, tokens=64) - f_small, 0, 0,
             "tokens = (image_size / 2)^2 after space-to-depth; " + hint_flops),
    ]
    checks += [  # the stretch goal: optional, SKIP while separable_probs is unwritten
        Item("stretch: separable_probs = dense float64 softmax of eq. 9 over the 5x7 grid (written in the check)",
             dense_error, 0.0, 1e-12, stretch=True, hint=
             "delta = key - query along each axis (query - key flips every center); P_row[h, a, c] is the "
             "softmax over c of -alpha (c - a - Delta_row)^2; query (a, b) is index a * W + b, key (c, d) is "
             "c * W + d: einsum 'hac,hbd->habcd' then reshape, not 'hac,hbd->hacbd'; the rows are H, the columns W"),
        Item("stretch: separable_probs = attention.FastSelfAttention2d's probabilities, 6x4 grid, a head at alpha 400",
             fast_layer_error, 0.0, 1e-12, stretch=True, hint=
             "a sharp head centred off the grid has logits of -12,800 or less at every key: exp underflows to 0 "
             "everywhere unless the largest logit is subtracted first (torch.softmax does)"),
    ]
    return checks
