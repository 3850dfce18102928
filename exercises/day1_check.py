"""Day 1's items: Theorem 1, written where it lives, held to float64 references and F.conv2d.

    python -m exercises.check 1

The functions: attention.Quadratic.logits, attention.SelfAttention2d.forward, prove.kernel_heads
and prove.off_center_mass. The references are written out here: eq. 9's v^T r_delta, eq. 16's
Gaussian logits and eq. 12's sum, the kernel's entries read one by one, F.conv2d, and Lemma 2's
probabilities as a softmax over a 41 x 41 grid. All in float64 with seeded inputs, so every CPU
gives the same verdicts.
"""
import math

import torch
import torch.nn.functional as F
from torch import nn

import attention
import prove
from exercises.check import Item

WRITE = {"attention.py": ("Quadratic.logits", "SelfAttention2d.forward"),
         "prove.py": ("kernel_heads", "off_center_mass")}
STRETCH = {}


def randn(*shape, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def eq9_error() -> float:
    """max |Quadratic.logits - (v^T r_delta - alpha ||Delta||^2)|, eq. 9's v and r_delta written out."""
    delta = 2 * randn(6, 5, 2, seed=1)  # [6, 5, 2], shifts off the integer grid too
    centers, alpha = torch.tensor([[0.7, -1.3], [-2.0, 0.4]], dtype=torch.float64), torch.tensor([2.5, 0.3])
    encoding = attention.Quadratic(2).double()
    with torch.no_grad():
        encoding.centers.copy_(centers)
    encoding.alpha = alpha
    r = torch.cat([(delta**2).sum(-1, keepdim=True), delta], dim=-1)  # [6, 5, 3]: (||delta||^2, delta_1, delta_2)
    found = encoding.logits(delta)
    errors = []
    for h in range(2):
        v = -encoding.alpha[h].item() * torch.cat([torch.ones(1, dtype=torch.float64), -2 * centers[h]])  # [3]
        errors.append((found[h] - (r @ v - encoding.alpha[h].item() * (centers[h] ** 2).sum())).abs().max())
    return max(errors).item()


def forward_error(content: bool):
    """max |SelfAttention2d.forward - eq. 12 written out| for a Gaussian layer on a 5 x 7 grid
    (3 heads, width 4, out 6). With `content`, P comes from the layer's attention_probs(x)."""
    def measure() -> float:
        torch.manual_seed(3)
        layer = attention.SelfAttention2d(4, heads=3, grid=(5, 7), encoding="gaussian", content=content,
                                          out_dim=6).double()
        x = randn(2, 5, 7, 4, seed=4)
        with torch.no_grad():
            if content:
                P = layer.attention_probs(x)  # [B, heads, T, T]
            else:
                pos = torch.cartesian_prod(torch.arange(5), torch.arange(7)).double()  # [T, 2] row-major
                d = pos[None, :, None] - pos[:, None, None] - layer.encoding.centers  # [T, T, heads, 2]: k - q - Delta
                inv_cov = layer.encoding.inv_cov  # [heads, 2, 2]
                logits = -0.5 * torch.einsum("qkhi,hij,qkhj->hqk", d, inv_cov, d)  # eq. 16
                P = logits.softmax(-1).expand(2, 3, 35, 35)
            X = x.reshape(2, 35, 4)
            W = layer.W_out.weight.view(6, 3, 4)  # [out, heads, dim]: W^(h) = W[:, h].T
            reference = sum(P[:, h] @ X @ W[:, h].T for h in range(3)) + layer.W_out.bias  # eq. 12: [B, T, out]
            return (layer(x).reshape(2, 35, 6) - reference).abs().max().item()
    return measure


def heads_error(part: str):
    """kernel_heads on a 3 x 5 kernel (2 -> 4 channels): its centers or W_out against the entries
    read one by one."""
    def measure() -> float:
        weight = randn(4, 2, 3, 5, seed=2)
        centers, W_out = prove.kernel_heads(weight)
        expected_centers, expected_W = [], torch.zeros(4, 15 * 2, dtype=torch.float64)
        for i in range(3):
            for j in range(5):
                h = i * 5 + j
                expected_centers.append([i - 1, j - 2])  # F.conv2d: output q reads input q + (i - 1, j - 2)
                for c in range(2):
                    expected_W[:, h * 2 + c] = weight[:, c, i, j]
        if part == "centers":
            return (centers - torch.tensor(expected_centers, dtype=torch.float64)).abs().max().item()
        return (W_out - expected_W).abs().max().item()
    return measure


def conv_error(kernel: tuple, alpha: float = 40.0):
    """max |prove.conv_to_attention(conv, alpha)(x) - conv(x)| in float64: a random conv (3 -> 4
    channels, with bias) on x [2, 3, 9, 11], or a Conv1d for a kernel of one number."""
    def measure() -> float:
        torch.manual_seed(5 + sum(kernel))
        one_d = len(kernel) == 1
        conv = (nn.Conv1d if one_d else nn.Conv2d)(3, 4, kernel, padding=tuple(k // 2 for k in kernel)).double()
        x = randn(2, 3, 11, seed=6) if one_d else randn(2, 3, 9, 11, seed=6)
        reference = (F.conv1d if one_d else F.conv2d)(x, conv.weight, conv.bias, padding=conv.padding)
        with torch.no_grad():
            return (prove.conv_to_attention(conv, alpha)(x) - reference).abs().max().item()
    return measure


def softmax_off_center(alpha: float, n: int = 41, center: tuple = (1, -2)) -> float:
    """1 - P[q, q + Delta] for eq. 15's softmax written out on an n x n grid, central query, float64."""
    pos = torch.cartesian_prod(torch.arange(n), torch.arange(n)).double() - n // 2  # k - q, q central
    logits = -alpha * ((pos - torch.tensor(center, dtype=torch.float64)) ** 2).sum(-1)
    P = logits.softmax(0).view(n, n)
    return 1 - P[n // 2 + center[0], n // 2 + center[1]].item()


def items(run: str) -> list:
    hint_conv = ("if the 3x3 and 5x5 items pass and 3x5 fails, look for a kernel's rows and columns swapped; "
                 "if all fail, check kernel_heads first: F.conv2d is a cross-correlation, it reads q + delta")
    checks = [
        Item("attention.Quadratic.logits = eq. 9's v^T r_delta - alpha ||Delta||^2 (float64, written in the check)",
             eq9_error, 0.0, 1e-12,
             "logits [heads, ...]: each head's center [2] must broadcast against delta [..., 2]; the logits are <= 0 "
             "and largest where delta = Delta"),
        Item("attention.SelfAttention2d.forward = eq. 12 written out, Gaussian heads, 5 x 7 grid, float64",
             forward_error(content=False), 0.0, 1e-12,
             "P_h X for every head, concatenated head by head (head h's dim columns h-th), then W_out; "
             "tokens are pixels in row-major order, and P[h, q, k] sums over the keys k"),
        Item("attention.SelfAttention2d.forward with content=True: P is [B, heads, T, T], one per image",
             forward_error(content=True), 0.0, 1e-12,
             "attention_probs(x) is [heads, T, T] for a position-only layer and [B, heads, T, T] with content: "
             "handle both (expand the first to the batch)"),
        Item("prove.kernel_heads: centers of a 3 x 5 kernel against its entries' shifts, row-major",
             heads_error("centers"), 0.0, 0.0,
             "head i * kw + j is centred at (i - kh//2, j - kw//2) as (row, col): no flip, F.conv2d reads q + delta"),
        Item("prove.kernel_heads: W_out of a 3 x 5 kernel (2 -> 4 channels) against its entries one by one",
             heads_error("W"), 0.0, 0.0,
             "W_out[:, h * C_in + c] = weight[:, c, i, j] for head h = i * kw + j"),
    ]
    for kernel in ((3, 3), (5, 5), (3, 5), (5,)):
        checks.append(Item(f"max |prove.conv_to_attention(conv, 40)(x) - F.conv{len(kernel)}d| for a random "
                           f"{' x '.join(map(str, kernel))} conv, float64", conv_error(kernel), 1e-12,
                           test="at most", hint=hint_conv))
    for alpha in (0.5, 2.0, 10.0):
        checks.append(Item(
            f"prove.off_center_mass({alpha:g}) = 1 - P[q, q + Delta] of eq. 15's softmax on a 41 x 41 grid",
            lambda a=alpha: prove.off_center_mass(a), softmax_off_center(alpha), 1e-12,
            "sum exp(-alpha n^2) over every integer n, negative ones too, until the terms are negligible "
            "(alpha 0.5 needs |n| up to about 9); the grid has two axes"))
    checks.append(Item("prove.off_center_mass(40) against its leading term 4 exp(-40) = 1.7e-17 (relative error)",
                       lambda: prove.off_center_mass(40.0) / (4 * math.exp(-40)) - 1, 0.0, 1e-9,
                       "1 - 1 / theta^2 rounds to 0 in float64 where the mass is below 1e-16: compute the mass off "
                       "the center directly, from the terms with n != 0"))
    return checks
