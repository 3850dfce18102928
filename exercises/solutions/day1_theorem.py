"""Day 1's reference solutions (exercises/day1_theorem.py's functions, written).

    python -m exercises.check 1 --solutions
"""
import math

import torch
import torch.nn.functional as F


def quadratic_logits(delta: torch.Tensor, center: torch.Tensor, alpha: float) -> torch.Tensor:
    """Eq. 9 as -alpha ||delta - Delta||^2: [..., 2] -> [...]."""
    center = torch.as_tensor(center, dtype=delta.dtype)
    return -alpha * ((delta - center) ** 2).sum(-1)


def conv_heads(weight: torch.Tensor) -> tuple:
    """Lemma 1: centers [K^2, 2] at the kernel's shifts, W^(h) [K^2, C_in, C_out] its slices."""
    K = weight.shape[-1]
    r = torch.arange(K, dtype=weight.dtype) - K // 2
    centers = torch.cartesian_prod(r, r)  # [K^2, 2], row-major: head i * K + j at (i - K//2, j - K//2)
    W = weight.flatten(2).permute(2, 1, 0)  # [C_out, C_in, K^2] -> [K^2, C_in, C_out]
    return centers, W


def mhsa_conv(x: torch.Tensor, centers: torch.Tensor, W: torch.Tensor, alpha: float) -> torch.Tensor:
    """Eq. 12 over the zero-padded grid, every head's T x T probabilities: [B, C_out, rows, cols]."""
    rows, cols = x.shape[2:]
    p = math.isqrt(len(centers)) // 2
    keys = F.pad(x, (p, p, p, p))  # [B, C_in, rows + 2p, cols + 2p]: zero tokens around the image
    B, C_in, Hp, Wp = keys.shape
    pos = torch.cartesian_prod(torch.arange(Hp), torch.arange(Wp)).to(x)  # [T, 2] row-major
    delta = pos[None, :] - pos[:, None]  # [T, T, 2]: key - query
    P = torch.stack([quadratic_logits(delta, c, alpha) for c in centers]).softmax(-1)  # [heads, T, T]
    X = keys.flatten(2).transpose(1, 2)  # [B, T, C_in]
    heads_out = torch.einsum("hqk,bki->bhqi", P, X)  # P_h X
    y = torch.einsum("bhqi,hio->boq", heads_out, W)  # sum_h P_h X W^(h): [B, C_out, T]
    return y.view(B, -1, Hp, Wp)[:, :, p:p + rows, p:p + cols]


def off_center_mass(alpha: float) -> float:
    """1 - 1 / theta(alpha)^2, theta summed over |n| <= N with exp(-alpha N^2) below 1e-22."""
    N = math.ceil(math.sqrt(50 / alpha))
    n = torch.arange(-N, N + 1, dtype=torch.float64)
    theta = torch.exp(-alpha * n**2).sum().item()
    return 1 - 1 / theta**2
