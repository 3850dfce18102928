"""Day 5's items: section 4.3's relative encodings and the interval the reviewer's question rests on.

    python -m exercises.check 5

The functions: attention.RowColumn.sinusoids, attention.RowColumn.axis_logits and
lab/experiments.py's difference. The references are written out here: the sinusoids in float64
(an odd dim too), the identity t[s] . t[s'] = sum_j cos(omega_j (s - s')), and section 4.3's
logits pair by pair on 5 x 7 and 6 x 4 grids, with their softmax. Welch's test is held to
scipy.stats.ttest_ind(equal_var=False), on numbers written here and on committed runs' final
test accuracies (metrics.jsonl's last line). All in float64 with seeded inputs.
"""
import json
import math
from pathlib import Path

import torch
from scipy import stats

import attention
from exercises.check import Item
from lab import experiments

WRITE = {"attention.py": ("RowColumn.sinusoids", "RowColumn.axis_logits"),
         "lab/experiments.py": ("difference",)}
STRETCH = {}

RESULTS = Path(__file__).resolve().parent.parent / "lab/results"
A, B = [0.61, 0.58, 0.66, 0.70], [0.52, 0.55, 0.49]  # two groups of unequal size and spread
C, D = [0.2, 0.9], [0.50, 0.51, 0.49, 0.50, 0.52, 0.48]  # one wide group of 2, one narrow group of 6
RUNS = {"learned": "reviewer/learned", "quadratic": "grid/laptop"}  # the reviewer's comparison, 3 seeds each


def gap(found: torch.Tensor, reference: torch.Tensor) -> float:
    """max |found - reference| in float64; infinite when the shapes differ (a FAIL, not the check's crash)."""
    if not isinstance(found, torch.Tensor) or tuple(found.shape) != tuple(reference.shape):
        return math.inf
    return (found.double() - reference).abs().max().item()


def frequencies(dim: int) -> torch.Tensor:
    return 10000 ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)  # omega_j, [ceil(dim/2)]


def sinusoid64(n: int, dim: int) -> torch.Tensor:
    """The sines of the shifts -(n-1)..n-1 in the first ceil(dim/2) columns, then the cosines, cut to dim (float64)."""
    table = torch.zeros(2 * n - 1, dim, dtype=torch.float64)
    half = (dim + 1) // 2
    for i in range(2 * n - 1):
        for j in range(half):
            angle = (i - (n - 1)) * float(frequencies(dim)[j])
            table[i, j] = math.sin(angle)
            if half + j < dim:
                table[i, half + j] = math.cos(angle)
    return table


def table_error(n: int, dim: int):
    def measure() -> float:
        return gap(attention.RowColumn.sinusoids(n, dim), sinusoid64(n, dim))
    return measure


def gram_error() -> float:
    """max |t[s] . t[s'] - sum_j cos(omega_j (s - s'))| over all rows of RowColumn.sinusoids(16, 64)."""
    t = attention.RowColumn.sinusoids(16, 64)
    s = torch.arange(-15, 16, dtype=torch.float64)
    reference = torch.cos((s[:, None] - s[None, :])[..., None] * frequencies(64)).sum(-1)  # [31, 31]
    if tuple(t.shape) != (31, 64):
        return math.inf
    return gap(t.double() @ t.double().T, reference)


def layer(encoding: str, grid: tuple, fast: bool = False) -> attention.SelfAttention2d:
    """The project's layer in float64 with seeded parameters (3 heads, width 8): the paper's, or train.py's."""
    torch.manual_seed(5)
    cls = attention.FastSelfAttention2d if fast else attention.SelfAttention2d
    return cls(8, heads=3, grid=grid, encoding=encoding).double()


def logits43(v_row, v_col, r_row, r_col, H: int, W: int) -> torch.Tensor:
    """Section 4.3 pair by pair: logit[h, q, k] = v_row[h] . r_row[k_row - q_row + H - 1]
    + v_col[h] . r_col[k_col - q_col + W - 1], q = (i, j) the token i * W + j: [heads, T, T]."""
    T = H * W
    out = torch.zeros(v_row.shape[0], T, T, dtype=torch.float64)
    for i in range(H):
        for j in range(W):
            for a in range(H):
                for b in range(W):
                    out[:, i * W + j, a * W + b] = v_row @ r_row[a - i + H - 1] + v_col @ r_col[b - j + W - 1]
    return out


def relative_error(encoding: str, grid: tuple, what: str):
    """max |the library's logits (or probabilities) - section 4.3 written out| on a grid, float64.
    what: "logits" (RowColumn.logits at every pair's shift), "probs" (SelfAttention2d.attention_probs)
    or "fast" (FastSelfAttention2d.attention_probs, a softmax per axis: what train.py runs)."""
    def measure() -> float:
        found = layer(encoding, grid, fast=what == "fast")
        e = found.encoding
        with torch.no_grad():
            if encoding == "learned":
                r_row, r_col = e.r_row.double(), e.r_col.double()
            else:  # the fixed tables, written out here
                r_row, r_col = sinusoid64(grid[0], 8), sinusoid64(grid[1], 8)
            reference = logits43(e.v_row.double(), e.v_col.double(), r_row, r_col, *grid)
            if what == "logits":
                return gap(e.logits(attention.pairwise_shifts(*grid).double()), reference)
            return gap(found.attention_probs(), reference.softmax(-1))
    return measure


def final_accuracies(name: str) -> list:
    """Each seed's final test accuracy (metrics.jsonl's last line) of a committed group of runs."""
    return [json.loads((RESULTS / f"{RUNS[name]}-s{s}/metrics.jsonl").read_text().splitlines()[-1])["test_acc"]
            for s in range(3)]


def welch_error(groups, keys: tuple):
    """max |experiments.difference(a, b)[key] - scipy's| over keys; groups() -> (a, b)."""
    def measure() -> float:
        a, b = groups()
        result = stats.ttest_ind(a, b, equal_var=False)
        interval = result.confidence_interval(0.95)
        reference = dict(difference=sum(a) / len(a) - sum(b) / len(b), low=interval.low, high=interval.high,
                         p=result.pvalue)
        found = experiments.difference(a, b)
        return max(abs(float(found[k]) - float(reference[k])) for k in keys)
    return measure


def items(run: str) -> list:
    hint_table = ("row i is the shift i - (n - 1): the first row is -(n-1), not 0; the sines fill the first "
                  "ceil(dim/2) columns and the cosines the rest (not interleaved); omega_j = 10000^(-2j/dim)")
    hint_logits = ("delta = key - query (not query - key): shift s reads row s + n - 1 of its axis's table, "
                   "n = self.grid[axis] (H for the rows, W for the columns); v_row pairs with r_row, v_col with r_col")
    hint_interval = ("v = s^2 / n with the sample variance (divided by n - 1); the interval is difference -/+ "
                     "t se with t Student's 0.975 quantile at Welch's df (not the normal's 1.96, not n_a + n_b - 2)")
    return [
        Item("attention.RowColumn.sinusoids(16, 64) = the sinusoids written out in float64 (s from -15 to 15)",
             table_error(16, 64), 0.0, 2e-6, hint_table),
        Item("attention.RowColumn.sinusoids(5, 7), dim odd: 4 sines, then 3 cosines (float64 written out)",
             table_error(5, 7), 0.0, 2e-6,
             "an odd dim: ceil(dim/2) sines, then the cosines, and the row cut to dim columns (the last cosine "
             "goes); the frequencies use 2j / dim with the table's own dim"),
        Item("attention.RowColumn.sinusoids(16, 64): t[s] . t[s'] = sum_j cos(omega_j (s - s')) for every pair of rows",
             gram_error, 0.0, 1e-5,
             "column j and column j + dim/2 must hold the sine and cosine of one angle, s omega_j"),
        Item("attention.RowColumn.logits (learned) at every pair of a 5 x 7 grid = section 4.3 written out (float64)",
             relative_error("learned", (5, 7), "logits"), 0.0, 1e-12, hint_logits),
        Item("SelfAttention2d(encoding='learned').attention_probs(), 6 x 4 grid = softmax of section 4.3 written out",
             relative_error("learned", (6, 4), "probs"), 0.0, 1e-12,
             "the probabilities are the softmax over keys of RowColumn.logits: " + hint_logits),
        Item("FastSelfAttention2d(encoding='learned').attention_probs() (one softmax per axis, as train.py runs it), "
             "5 x 7 grid", relative_error("learned", (5, 7), "fast"), 0.0, 1e-12,
             "the fast layer calls axis_logits for each axis on its own, with shifts along that axis only: "
             + hint_logits),
        Item("attention.RowColumn.logits (sinusoidal) at every pair of a 6 x 4 grid = section 4.3 on float64 sinusoids",
             relative_error("sinusoidal", (6, 4), "logits"), 0.0, 1e-6,
             "the tables are your sinusoids (float32, hence the tolerance): " + hint_logits),
        Item("FastSelfAttention2d(encoding='sinusoidal').attention_probs(), 5 x 7 grid = softmax written out",
             relative_error("sinusoidal", (5, 7), "fast"), 0.0, 1e-6,
             "sin is odd: a shift read with the wrong sign changes the logits of the fixed tables too"),
        Item("lab/experiments.py difference(a, b), 4 and 3 numbers: the difference and the 95% interval's ends "
             "= scipy.stats.ttest_ind(equal_var=False)", welch_error(lambda: (A, B), ("difference", "low", "high")),
             0.0, 1e-10, hint_interval),
        Item("difference(a, b), 4 and 3 numbers: Welch's two-sided p-value = scipy.stats.ttest_ind(equal_var=False)",
             welch_error(lambda: (A, B), ("p",)), 0.0, 1e-10,
             "two-sided: the probability of |T| >= |difference| / se, both tails (scipy.stats.t.sf)"),
        Item("difference(a, b), a wide group of 2 and a narrow group of 6: interval and p against scipy",
             welch_error(lambda: (C, D), ("low", "high", "p")), 0.0, 1e-10,
             "df = (v_a + v_b)^2 / (v_a^2 / (n_a - 1) + v_b^2 / (n_b - 1)): near 1 here, where Student's pooled "
             "test would take 6"),
        Item("difference on the committed runs' final test accuracies, lab/results/reviewer/learned-s* minus "
             "lab/results/grid/laptop-s* (quadratic), against scipy.stats.ttest_ind(equal_var=False)",
             welch_error(lambda: (final_accuracies("learned"), final_accuracies("quadratic")),
                         ("difference", "low", "high", "p")), 0.0, 1e-10,
             "the same function on 3 and 3 numbers: mean(a) - mean(b), a the learned runs"),
    ]
