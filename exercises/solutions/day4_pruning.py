"""Day 4's reference solutions (exercises/day4_pruning.py's functions, written), for instructors.

    python -m exercises.check 4 --solutions
"""
import torch


def quadratic_inv_cov(alpha: torch.Tensor) -> torch.Tensor:
    """2 alpha I per head, since -alpha ||d||^2 = -1/2 d^T (2 alpha I) d."""
    identity = torch.eye(2, dtype=alpha.dtype, device=alpha.device)
    return 2 * alpha[:, None, None] * identity  # [heads, 2, 2]


def degenerate(inv_cov: torch.Tensor, eigenvalue_below: float = 1e-5, condition_above: float = 1e5) -> torch.Tensor:
    """Largest eigenvalue below `eigenvalue_below`, or condition number above `condition_above` (A.1)."""
    smallest, largest = torch.linalg.eigvalsh(inv_cov.double()).unbind(-1)  # ascending: [heads] each
    singular = smallest <= 0  # round-off can push a singular matrix's smallest eigenvalue below 0
    return (largest < eigenvalue_below) | singular | (largest / smallest > condition_above)


def parameters_after_pruning(parameters: int, heads_before: list, heads_after: list, dim: int,
                             per_head: int = 3) -> int:
    """Each pruned head takes its positional parameters and its dim x dim block of W_out (not W_out's bias)."""
    pruned = sum(before - after for before, after in zip(heads_before, heads_after))
    return parameters - pruned * (dim * dim + per_head)
