"""Day 5's reference solutions (exercises/day5_open.py's functions, written).

    python -m exercises.check 5 --solutions
"""
import math
import statistics

import torch
from scipy import stats


def sinusoidal_table(n: int, dim: int) -> torch.Tensor:
    """Sines of the shifts -(n-1)..n-1 in the first ceil(dim/2) columns, then cosines, cut to dim: [2n-1, dim]."""
    shift = torch.arange(-(n - 1), n, dtype=torch.float32)[:, None]  # [2n-1, 1]
    omega = 10000 ** (-torch.arange(0, dim, 2, dtype=torch.float32) / dim)  # [ceil(dim/2)]
    angle = shift * omega  # [2n-1, ceil(dim/2)]
    return torch.cat([angle.sin(), angle.cos()], dim=1)[:, :dim]


def relative_logits(v_row: torch.Tensor, v_col: torch.Tensor, r_row: torch.Tensor, r_col: torch.Tensor,
                    H: int, W: int) -> torch.Tensor:
    """v_row_h . r_row[k_row - q_row] + v_col_h . r_col[k_col - q_col] over every (q, k) pair: [heads, T, T]."""
    rows, cols = torch.arange(H), torch.arange(W)
    row_logits = (r_row @ v_row.T)[rows[None, :] - rows[:, None] + H - 1]  # [H, H, heads]: query row, key row
    col_logits = (r_col @ v_col.T)[cols[None, :] - cols[:, None] + W - 1]  # [W, W, heads]
    logits = row_logits[:, None, :, None] + col_logits[None, :, None, :]  # [H, W, H, W, heads]: q = (i, j), k = (a, b)
    return logits.reshape(H * W, H * W, -1).movedim(-1, 0)  # [heads, T, T]


def welch_interval(a, b) -> dict:
    """mean(a) - mean(b), its 95% Welch interval (Welch-Satterthwaite df) and two-sided p-value."""
    v_a, v_b = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    se = math.sqrt(v_a + v_b)
    df = (v_a + v_b) ** 2 / (v_a**2 / (len(a) - 1) + v_b**2 / (len(b) - 1))
    difference = statistics.fmean(a) - statistics.fmean(b)
    half = float(stats.t.ppf(0.975, df)) * se
    return dict(difference=difference, low=difference - half, high=difference + half, df=df,
                p=float(2 * stats.t.sf(abs(difference) / se, df)))
