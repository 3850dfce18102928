"""Day 5's items: section 4.3's relative encodings and the interval the reviewer's comparison rests on.

    python -m exercises.check 5                # exercises/day5_open.py
    python -m exercises.check 5 --solutions    # exercises/solutions/day5_open.py

References: attention.RowColumn.sinusoids and the float64 sinusoid written out here;
attention.SelfAttention2d's position logits and probabilities (learned and sinusoidal encodings,
float64, seeded); scipy.stats.ttest_ind(equal_var=False) on numbers written here and on the
final test accuracies of committed runs (metrics.jsonl's last line).
"""
import json
from pathlib import Path

import torch
from scipy import stats

from attention import RowColumn, SelfAttention2d
from exercises.check import Item

WRITE = ("sinusoidal_table", "relative_logits", "welch_interval")  # exercises/day5_open.py
STRETCH = ()

RESULTS = Path(__file__).parent.parent / "lab/results"
A, B = [0.61, 0.58, 0.66, 0.70], [0.52, 0.55, 0.49]  # two groups of unequal size and spread
GROUPS = {"learned": "reviewer/learned", "quadratic": "grid/laptop"}  # the reviewer's comparison, 3 seeds each


def table(yours, n: int, dim: int) -> torch.Tensor:
    """Your sinusoidal_table(n, dim) in float64, its shape checked."""
    t = yours.sinusoidal_table(n, dim)
    if tuple(t.shape) != (2 * n - 1, dim):
        raise ValueError(f"sinusoidal_table({n}, {dim}) has shape {list(t.shape)}, expected [{2 * n - 1}, {dim}]")
    return t.double()


def sinusoid64(n: int, dim: int) -> torch.Tensor:
    """The sines of the shifts -(n-1)..n-1 in the first ceil(dim/2) columns, then the cosines, in float64."""
    angle = torch.arange(-(n - 1), n, dtype=torch.float64)[:, None] * frequencies(dim)
    return torch.cat([angle.sin(), angle.cos()], dim=1)[:, :dim]


def frequencies(dim: int) -> torch.Tensor:
    return 10000 ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)  # omega_j, [ceil(dim/2)]


def table_error(n: int, dim: int, reference):
    def measure(yours) -> float:
        return (table(yours, n, dim) - reference(n, dim).double()).abs().max().item()
    return measure


def unit_pairs(yours) -> float:
    """max |sin^2 + cos^2 - 1| over every row's pairs (column j, column j + dim/2), dim = 64."""
    t = table(yours, 16, 64)
    return (t[:, :32] ** 2 + t[:, 32:] ** 2 - 1).abs().max().item()


def gram_error(yours) -> float:
    """max |t[s] . t[s'] - sum_j cos(omega_j (s - s'))| over all rows of sinusoidal_table(16, 64)."""
    t = table(yours, 16, 64)
    s = torch.arange(-15, 16, dtype=torch.float64)
    reference = torch.cos((s[:, None] - s[None, :])[..., None] * frequencies(64)).sum(-1)  # [31, 31]
    return (t @ t.T - reference).abs().max().item()


def layer(encoding: str, grid: tuple, seed: int) -> SelfAttention2d:
    """The project's layer in float64 with seeded parameters (3 heads, width 8)."""
    torch.manual_seed(seed)
    return SelfAttention2d(8, heads=3, grid=grid, encoding=encoding).double()


def logits_error(encoding: str, grid: tuple, probabilities: bool):
    """max |your relative_logits (or their softmax over keys) - the layer's position_logits (attention_probs)|."""
    def measure(yours) -> float:
        found = layer(encoding, grid, seed=5)
        e = found.encoding
        with torch.no_grad():
            logits = yours.relative_logits(e.v_row, e.v_col, e.r_row, e.r_col, *grid)  # [heads, T, T]
            reference = found.attention_probs() if probabilities else found.position_logits()
        T = grid[0] * grid[1]
        if tuple(logits.shape) != (3, T, T):
            raise ValueError(f"relative_logits gave shape {list(logits.shape)}, expected [3, {T}, {T}]")
        return ((logits.softmax(-1) if probabilities else logits) - reference).abs().max().item()
    return measure


def final_accuracies(name: str) -> list:
    """Each seed's final test accuracy (metrics.jsonl's last line) of a committed group of runs."""
    return [json.loads((RESULTS / f"{GROUPS[name]}-s{s}/metrics.jsonl").read_text().splitlines()[-1])["test_acc"]
            for s in range(3)]


def welch_error(groups, keys: tuple):
    """max |your welch_interval(a, b)[key] - scipy's| over keys (ttest_ind with equal_var=False); groups() -> (a, b)."""
    def measure(yours) -> float:
        x, y = groups()
        result = stats.ttest_ind(x, y, equal_var=False)
        interval = result.confidence_interval(0.95)
        reference = dict(difference=sum(x) / len(x) - sum(y) / len(y), low=interval.low, high=interval.high,
                         df=result.df, p=result.pvalue)
        found = yours.welch_interval(x, y)
        return max(abs(float(found[k]) - float(reference[k])) for k in keys)
    return measure


def items(run: str) -> list:
    return [
        Item("sinusoidal_table(16, 64) against attention.RowColumn.sinusoids (float32)",
             table_error(16, 64, RowColumn.sinusoids), 0.0, 1e-6,
             "row i is the shift i - (n - 1) (the first row is -(n-1), not 0); the sines fill the first half "
             "of the columns and the cosines the second (not interleaved); omega_j = 10000^(-2j/dim)"),
        Item("sinusoidal_table(5, 7), dim odd, against attention.RowColumn.sinusoids (float32)",
             table_error(5, 7, RowColumn.sinusoids), 0.0, 1e-6,
             "an odd dim: ceil(dim/2) sines, then the cosines, and the table cut to dim columns (the last cosine "
             "goes); the frequencies use 2j / dim with the table's dim, not dim rounded"),
        Item("sinusoidal_table(16, 64) against the sinusoid written out in float64",
             table_error(16, 64, sinusoid64), 0.0, 1e-6,
             "sin then cos of s * 10000^(-2j/dim), s from -(n-1) to n-1"),
        Item("sinusoidal_table(16, 64): every (sin, cos) pair of every row has unit norm (closed form 1)",
             unit_pairs, 0.0, 1e-6,
             "column j and column j + dim/2 must be the sine and cosine of the same angle"),
        Item("sinusoidal_table(16, 64): t[s] . t[s'] = sum_j cos(omega_j (s - s')), a function of s - s' (float64)",
             gram_error, 0.0, 1e-5,
             "the inner product of two rows depends on the distance between their shifts only if each pair "
             "holds the sine and cosine of one frequency times the shift"),
        Item("relative_logits against SelfAttention2d(encoding='learned').position_logits(), grid 5 x 7 (float64)",
             logits_error("learned", (5, 7), probabilities=False), 0.0, 1e-12,
             "delta = key - query (not query - key); a shift s indexes row s + H - 1 of r_row (s + W - 1 of r_col); "
             "v_row pairs with the row table r_row, v_col with the column table r_col; tokens row-major, "
             "so q = i * W + j"),
        Item("softmax of relative_logits against the learned SelfAttention2d.attention_probs(), grid 6 x 4 (float64)",
             logits_error("learned", (6, 4), probabilities=True), 0.0, 1e-12,
             "the softmax runs over the keys (the last axis); with H != W a swapped row and column shows here"),
        Item("softmax of relative_logits on the fixed tables against the sinusoidal SelfAttention2d.attention_probs(), "
             "grid 7 x 5 (float64)",
             logits_error("sinusoidal", (7, 5), probabilities=True), 0.0, 1e-12,
             "the same formula as the learned encoding's, only the tables r are attention.RowColumn.sinusoids"),
        Item("welch_interval(a, b): difference and interval ends against scipy.stats.ttest_ind(equal_var=False)",
             welch_error(lambda: (A, B), ("difference", "low", "high")), 0.0, 1e-9,
             "sample variances divide by n - 1; the interval is difference -/+ t.ppf(0.975, df) * se with Welch's "
             "df, not n_a + n_b - 2 (that is Student's pooled test)"),
        Item("welch_interval(a, b): the Welch-Satterthwaite df against scipy.stats.ttest_ind(equal_var=False).df",
             welch_error(lambda: (A, B), ("df",)), 0.0, 1e-9,
             "df = (v_a + v_b)^2 / (v_a^2 / (n_a - 1) + v_b^2 / (n_b - 1)) with v = s^2 / n"),
        Item("welch_interval(a, b): the two-sided p-value against scipy.stats.ttest_ind(equal_var=False)",
             welch_error(lambda: (A, B), ("p",)), 0.0, 1e-9,
             "two-sided: 2 * t.sf(|difference| / se, df)"),
        Item("welch_interval on the committed runs' final test accuracies, lab/results/reviewer/learned-s* minus "
             "lab/results/grid/laptop-s* (quadratic), against scipy.stats.ttest_ind(equal_var=False)",
             welch_error(lambda: (final_accuracies("learned"), final_accuracies("quadratic")),
                         ("difference", "low", "high", "p")), 0.0, 1e-9,
             "the same function as above on 3 and 3 numbers: mean(a) - mean(b), a the learned runs"),
    ]
