"""Day 1's items: Theorem 1 by hand, held to float64 references, F.conv2d and the project's code.

    python -m exercises.check 1                # exercises/day1_theorem.py
    python -m exercises.check 1 --solutions    # exercises/solutions/day1_theorem.py

References: eq. 9's v^T r_delta written out here; attention.SelfAttention2d's probabilities
(the quadratic encoding); prove.conv_to_attention's construction and layer; F.conv2d. All in
float64 with seeded inputs, so every CPU gives the same verdicts.
"""
import torch
import torch.nn.functional as F
from torch import nn

from attention import SelfAttention2d
from exercises.check import Item
from prove import conv_to_attention

WRITE = ("quadratic_logits", "conv_heads", "mhsa_conv", "off_center_mass")  # exercises/day1_theorem.py
STRETCH = ()


def randn(*shape, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def conv(c_in: int, c_out: int, K: int, seed: int) -> nn.Conv2d:
    """A bias-free float64 K x K convolution, zero padding K//2, with seeded weights."""
    layer = nn.Conv2d(c_in, c_out, K, padding=K // 2, bias=False).double()
    with torch.no_grad():
        layer.weight.copy_(randn(c_out, c_in, K, K, seed=seed))
    return layer


def quadratic_layer(grid: tuple, center: tuple, alpha: float) -> SelfAttention2d:
    """The project's one-head quadratic layer (eq. 9) in float64, center and alpha set."""
    layer = SelfAttention2d(1, heads=1, grid=grid, encoding="quadratic").double()
    with torch.no_grad():
        layer.encoding.centers.copy_(torch.tensor([center], dtype=torch.float64))
    layer.encoding.alpha = alpha
    return layer


def eq9_error(yours) -> float:
    """max |yours - (v^T r_delta - alpha ||Delta||^2)| with eq. 9's v and r_delta written out."""
    delta = 2 * randn(6, 5, 2, seed=1)  # [6, 5, 2], shifts off the integer grid too
    center, alpha = torch.tensor([0.7, -1.3], dtype=torch.float64), 2.5
    v = -alpha * torch.cat([torch.ones(1, dtype=torch.float64), -2 * center])  # [3]
    r = torch.cat([(delta**2).sum(-1, keepdim=True), delta], dim=-1)  # [6, 5, 3]: (||delta||^2, delta_1, delta_2)
    reference = r @ v - alpha * (center**2).sum()
    return (yours.quadratic_logits(delta, center, alpha) - reference).abs().max().item()


def softmax_error(yours) -> float:
    """max |softmax_k quadratic_logits(k - q) - attention.SelfAttention2d's P| on a 7 x 9 grid."""
    grid, center, alpha = (7, 9), (1.3, -0.6), 0.8
    P = quadratic_layer(grid, center, alpha).attention_probs()[0]  # [T, T]
    pos = torch.cartesian_prod(torch.arange(grid[0]), torch.arange(grid[1])).double()  # [T, 2] row-major
    delta = pos[None, :] - pos[:, None]  # [T, T, 2]: key - query
    logits = yours.quadratic_logits(delta, torch.tensor(center, dtype=torch.float64), alpha)
    return (logits.softmax(-1) - P).abs().max().item()


def heads_error(part: str):
    """max |conv_heads(weight)'s centers or W - prove.conv_to_attention's|, a 5 x 5 kernel, 3 -> 4 channels."""
    def measure(yours) -> float:
        c = conv(3, 4, 5, seed=2)
        layer = conv_to_attention(c, alpha=1.0).attention
        centers, W = yours.conv_heads(c.weight.detach())
        if part == "centers":
            return (centers - layer.encoding.centers.detach()).abs().max().item()
        W_ref = layer.W_out.weight.detach().view(4, 25, 3).permute(1, 2, 0)  # [heads, C_in, C_out]
        return (W - W_ref).abs().max().item()
    return measure


def layer_error(yours) -> float:
    """max |mhsa_conv - prove.conv_to_attention(conv, 1.0)(x)|, given the layer's centers, W^(h) and alpha."""
    c, x = conv(3, 4, 3, seed=3), randn(2, 3, 9, 11, seed=4)
    layer = conv_to_attention(c, alpha=1.0)
    encoding, W_out = layer.attention.encoding, layer.attention.W_out
    W = W_out.weight.detach().view(4, 9, 3).permute(1, 2, 0)  # [heads, C_in, C_out]
    alpha = encoding.alpha[0].item()
    with torch.no_grad():
        return (yours.mhsa_conv(x, encoding.centers.detach(), W, alpha) - layer(x)).abs().max().item()


def conv_error(K: int, alpha: float = 40.0):
    """max |mhsa_conv(x, *conv_heads(weight), alpha) - F.conv2d(x, weight, padding=K//2)|, a random
    K x K conv (3 -> 4 channels) on x [2, 3, 9, 11]. The handout's question 4 calls it at other alphas."""
    def measure(yours) -> float:
        weight, x = randn(4, 3, K, K, seed=5 + K), randn(2, 3, 9, 11, seed=6 + K)
        centers, W = yours.conv_heads(weight)
        return (yours.mhsa_conv(x, centers, W, alpha) - F.conv2d(x, weight, padding=K // 2)).abs().max().item()
    return measure


def measured_off_center(alpha: float, n: int = 41, center: tuple = (1, -2)) -> float:
    """1 - P[q, q + Delta] of attention.SelfAttention2d's quadratic head, n x n grid, central query."""
    P = quadratic_layer((n, n), center, alpha).attention_probs()[0]  # [T, T]
    q = (n // 2) * n + n // 2
    return 1 - P[q, q + center[0] * n + center[1]].item()


def items(run: str) -> list:
    hint_conv = ("if the alpha-1 item passes, look at conv_heads: the kernel read without a flip "
                 "(F.conv2d is a cross-correlation), W^(h) = weight[:, :, i, j].T, heads row-major")
    checks = [
        Item("quadratic_logits = eq. 9's v^T r_delta - alpha ||Delta||^2 (float64, written in the check)",
             eq9_error, 0.0, 1e-12,
             "return -alpha * ||delta - center||^2, summed over the last axis (row, col); eq. 9's "
             "v^T r_delta alone misses the constant -alpha ||Delta||^2; logits are <= 0"),
        Item("softmax over keys of quadratic_logits(k - q) = attention.SelfAttention2d(quadratic)'s P, 7x9 grid",
             softmax_error, 0.0, 1e-12,
             "the check passes delta = key - query [T, T, 2]: center [2] must broadcast against delta [..., 2]"),
        Item("conv_heads centers = prove.conv_to_attention's encoding.centers (5x5 kernel)",
             heads_error("centers"), 0.0, 0.0,
             "head i * K + j (row-major) is centred at (i - K//2, j - K//2) as (row, col), not flipped"),
        Item("conv_heads W = prove.conv_to_attention's W_out.weight as [heads, C_in, C_out] (5x5, 3 -> 4)",
             heads_error("W"), 0.0, 0.0,
             "W^(h) = weight[:, :, i, j] transposed to [C_in, C_out], heads in the centers' order"),
        Item("mhsa_conv at alpha 1 = prove.conv_to_attention(conv, 1.0)(x), 3x3, float64",
             layer_error, 0.0, 1e-12,
             "pad x with K//2 rings of zero tokens first and take the softmax over every key of the padded "
             "grid (last axis), delta = key - query; keep only the original pixels"),
        Item("max |mhsa_conv - F.conv2d| at alpha 40, random 3x3 conv, float64",
             conv_error(3), 1e-12, test="at most", hint=hint_conv),
        Item("max |mhsa_conv - F.conv2d| at alpha 40, random 5x5 conv, float64",
             conv_error(5), 1e-12, test="at most", hint=hint_conv),
    ]
    for alpha in (0.5, 2.0, 10.0):
        checks.append(Item(
            f"off_center_mass({alpha:g}) = 1 - P[q, q + Delta] of attention's quadratic head, 41x41, central query",
            lambda yours, a=alpha: yours.off_center_mass(a), measured_off_center(alpha), 1e-12,
            "theta sums exp(-alpha n^2) over every integer n, negative ones too, until the terms are "
            "negligible (alpha 0.5 needs |n| up to about 9); two axes: 1 - 1 / theta^2"))
    return checks
