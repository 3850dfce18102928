"""Day 4, pruning: your functions (paper A.1, eqs. 15-16, Table 2).

Write each function below (replace `raise NotImplementedError`), then from the project's root:

    python -m exercises.check 4

The handout is exercises/day4_pruning.md. Write these from the paper, attention.py's encodings
and prune.py's docstring; do not call prune.py here (the check holds your functions to it).
"""
import torch


def quadratic_inv_cov(alpha: torch.Tensor) -> torch.Tensor:
    """The Sigma^-1 of eq. 16 that a quadratic head of eq. 9 is: alpha [heads] -> [heads, 2, 2].

    Eq. 9's logit -alpha ||delta - Delta||^2 and eq. 16's -1/2 (delta - Delta)^T Sigma^-1 (delta - Delta)
    are the same function of the shift delta for one matrix per head, a multiple of the 2 x 2
    identity. Returns those matrices in alpha's dtype.
    """
    raise NotImplementedError


def degenerate(inv_cov: torch.Tensor, eigenvalue_below: float = 1e-5, condition_above: float = 1e5) -> torch.Tensor:
    """A.1's rule: which heads to prune, from each head's Sigma^-1 [heads, 2, 2] -> bool [heads].

    Sigma^-1 is symmetric and positive semi-definite (A.1: S S^T). A head goes when the largest
    eigenvalue of its Sigma^-1 is below `eigenvalue_below` (it attends to every pixel alike), or
    when its condition number, the largest eigenvalue over the smallest, is above `condition_above`
    (a thin stripe). A singular Sigma^-1 (smallest eigenvalue 0, or a little below 0 by round-off)
    has an infinite condition number.
    """
    raise NotImplementedError


def parameters_after_pruning(parameters: int, heads_before: list, heads_after: list, dim: int,
                             per_head: int = 3) -> int:
    """The network's parameter count once layer i keeps heads_after[i] of its heads_before[i] heads.

    `parameters`: the count before pruning. A pruned head takes with it its positional parameters
    (`per_head` of them: quadratic 3, a center Delta and alpha; gaussian 6, a center and the 2 x 2
    Sigma^-1/2) and the block of its layer's W_out = Linear(heads * dim, dim) that reads its output:
    `dim` input columns of `dim` entries each, a dim x dim block (eq. 11's W^(h); W_out's bias stays;
    prune.remove_heads). Returns an int.
    """
    raise NotImplementedError
