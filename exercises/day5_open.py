"""Day 5, what the paper leaves open: your functions (section 4.3, and its reviewer's question).

Write each function below (replace `raise NotImplementedError`), then from the project's root:

    python -m exercises.check 5

The handout is exercises/day5_open.md. Conventions are attention.py's: a shift is
delta = key - query as (row, col), tokens are pixels in row-major order, P[h, q, k].
Write these with torch (and scipy.stats.t for the interval); do not call attention.py or
lab/compare.py here (the check holds your functions to them).
"""
import torch


def sinusoidal_table(n: int, dim: int) -> torch.Tensor:
    """The Transformer's fixed sinusoids (Vaswani et al.) of one axis's shifts -(n-1)..n-1, for an axis of n
    pixels: [2n - 1, dim], float32, row i for the shift s = i - (n - 1).

    Row s holds sin(s omega_j) and cos(s omega_j) for the frequencies omega_j = 10000^(-2j / dim),
    j = 0, 1, ..., ceil(dim / 2) - 1. Lay them out as attention.RowColumn.sinusoids does (read it: which
    columns hold the sines, which the cosines, and which column goes when dim is odd); the paper of
    Vaswani et al. interleaves them, this project does not.
    """
    raise NotImplementedError


def relative_logits(v_row: torch.Tensor, v_col: torch.Tensor, r_row: torch.Tensor, r_col: torch.Tensor,
                    H: int, W: int) -> torch.Tensor:
    """Section 4.3's position logits of every head at every (query, key) pair of an H x W grid: [heads, T, T].

    logit_h(q, k) = v_row_h . r_row[delta_row] + v_col_h . r_col[delta_col], with delta = k - q (row, col) and
    T = H * W tokens in row-major order. The tables cover each axis's shifts from -(n-1): r_row [2H - 1, dim]
    holds the shift s of the rows in its row s + H - 1, r_col [2W - 1, dim] the columns' likewise.
    v_row, v_col [heads, dim]: each head's row and column halves of eq. 8's v (attention.RowColumn's
    v_row, v_col; not eq. 8's u, which multiplies the keys' content). The learned encoding and the
    sinusoidal one differ only in their tables r. Same dtype as the inputs.
    """
    raise NotImplementedError


def welch_interval(a, b) -> dict:
    """The difference of two groups' means, mean(a) - mean(b), with its 95% interval and Welch's test.

    a, b: each group's numbers (one per seed), at least 2 each. With sample variances s^2 (divided by
    n - 1) and v_a = s_a^2 / n_a, v_b = s_b^2 / n_b: the standard error se = sqrt(v_a + v_b), the
    Welch-Satterthwaite degrees of freedom df = (v_a + v_b)^2 / (v_a^2 / (n_a - 1) + v_b^2 / (n_b - 1)),
    the interval difference -/+ t se with t the 0.975 quantile of Student's t with df degrees of freedom,
    and the two-sided p-value, the probability that |T_df| exceeds |difference| / se.
    Returns {"difference", "low", "high", "df", "p"}, Python floats. Use scipy.stats.t for the
    quantile and the tail (not ttest_ind: the check holds you to it).
    """
    raise NotImplementedError
