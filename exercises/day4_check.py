"""Day 4's items: A.1's pruning rule and Table 2's counts, held to prune.py, attention.py and the paper.

    python -m exercises.check 4                # exercises/day4_pruning.py
    python -m exercises.check 4 --solutions    # exercises/solutions/day4_pruning.py

References: literal matrices; attention.Quadratic's eq. 9 logits (float64); prune.head_measures,
prune.degenerate_heads and prune.remove_heads on the committed checkpoint of
lab/results/fig2/deep6-e6-s0 (6 layers of width 64, 2 degenerate heads); model.count_parameters
of model.build_model's Gaussian networks (Table 2's 9.7M). Hand cases are float64 and every input
is written out or seeded, so every CPU gives the same verdicts.
"""
import math
from functools import lru_cache
from pathlib import Path

import torch

import prune
from attention import Quadratic, pairwise_shifts
from exercises.check import Item
from model import build_model, count_parameters, model_from_config

WRITE = ("quadratic_inv_cov", "degenerate", "parameters_after_pruning")  # exercises/day4_pruning.py
STRETCH = ()

RUN = Path(__file__).parent.parent / "lab/results/fig2/deep6-e6-s0"
PRUNED = [7, 5, 8, 7, 3, 9]  # Table 2's Gaussian model: A.1 pruned [2, 4, 1, 2, 6, 0] of 9 heads a layer


@lru_cache(maxsize=None)
def deep6():
    """The committed 6-layer run's model (paper's layer class), its config and prune's verdict per layer."""
    checkpoint = torch.load(RUN / "checkpoint.pt", weights_only=True)
    model = model_from_config(checkpoint["config"])
    model.load_state_dict(checkpoint["model"])
    return model, checkpoint["config"], prune.degenerate_heads(model, prune.Config())


def alphas(model) -> list:
    return [layer.encoding.alpha.detach() for layer in model.attention_layers]  # [heads] each, float32


def max_error(yours: torch.Tensor, reference: torch.Tensor) -> float:
    if tuple(yours.shape) != tuple(reference.shape):
        raise ValueError(f"shape {list(yours.shape)}, expected {list(reference.shape)}")
    return (yours.double() - reference.double()).abs().max().item()


def literal_error(yours) -> float:
    """alpha = (0.5, 2, 1e-6): Sigma^-1 = I, 4I, 2e-6 I."""
    alpha = torch.tensor([0.5, 2.0, 1e-6], dtype=torch.float64)
    expected = torch.tensor([[[1, 0], [0, 1]], [[4, 0], [0, 4]], [[2e-6, 0], [0, 2e-6]]], dtype=torch.float64)
    return max_error(yours.quadratic_inv_cov(alpha), expected)


def logit_error(yours) -> float:
    """max |eq. 16's -1/2 d^T Sigma^-1 d with your Sigma^-1 - attention.Quadratic's eq. 9 logits|, 5 heads, 5x6 grid."""
    encoding = Quadratic(5).double()
    encoding.alpha = torch.tensor([0.05, 0.5, 1.0, 3.0, 20.0], dtype=torch.float64)
    delta = pairwise_shifts(5, 6).double()  # [T, T, 2]
    with torch.no_grad():
        encoding.centers.copy_(2 * torch.randn(5, 2, generator=torch.Generator().manual_seed(4), dtype=torch.float64))
        d = delta[None] - encoding.centers[:, None, None, :]  # [heads, T, T, 2]
        reference = encoding.logits(delta)  # [heads, T, T]
        inv_cov = yours.quadratic_inv_cov(encoding.alpha).double()  # [heads, 2, 2]
        if tuple(inv_cov.shape) != (5, 2, 2):
            raise ValueError(f"shape {list(inv_cov.shape)}, expected [5, 2, 2]")
        return max_error(-0.5 * torch.einsum("hqki,hij,hqkj->hqk", d, inv_cov, d), reference)


def eigenvalue_error(yours) -> float:
    """max over deep6-e6-s0's 54 heads of |your largest eigenvalue - prune.head_measures'| / (1 + prune's)."""
    model, _, _ = deep6()
    worst = 0.0
    for layer, alpha in zip(model.attention_layers, alphas(model)):
        largest = torch.linalg.eigvalsh(yours.quadratic_inv_cov(alpha).double())[:, -1]  # [heads]
        reference = prune.head_measures(layer)["largest eigenvalue"]
        worst = max(worst, ((largest - reference).abs() / (1 + reference)).max().item())
    return worst


def rotated(eigenvalues: tuple, angle: float) -> torch.Tensor:
    """R diag(eigenvalues) R^T, R the rotation by `angle` radians: [2, 2]."""
    c, s = math.cos(angle), math.sin(angle)
    R = torch.tensor([[c, -s], [s, c]], dtype=torch.float64)
    return R @ torch.diag(torch.tensor(eigenvalues, dtype=torch.float64)) @ R.T


# (name, Sigma^-1, condition_above, pruned?, hint): each head is judged in one batch of all of them.
CASES = [
    ("isotropic and tiny, 1e-7 I", 1e-7 * torch.eye(2, dtype=torch.float64), 1e5, True,
     "its condition number is 1: only the eigenvalue test prunes it (largest 1e-7 < 1e-5)"),
    ("isotropic, 2e-5 I: kept", 2e-5 * torch.eye(2, dtype=torch.float64), 1e5, False,
     "largest eigenvalue 2e-5 is not below 1e-5, condition 1: keep it (a comparison the wrong way round?)"),
    ("on the eigenvalue threshold, 1e-5 I: kept", 1e-5 * torch.eye(2, dtype=torch.float64), 1e5, False,
     "largest eigenvalue exactly 1e-5 is not below 1e-5: A.1's test is <, not <="),
    ("small, eigenvalues 1e-4 and 5e-6: kept", torch.diag(torch.tensor([1e-4, 5e-6], dtype=torch.float64)), 1e5, False,
     "A.1 judges the largest eigenvalue (1e-4, not below 1e-5) and the condition number (20): keep it"),
    ("healthy, [[2, 0.5], [0.5, 1]]: kept", torch.tensor([[2, 0.5], [0.5, 1]], dtype=torch.float64), 1e5, False,
     "eigenvalues 2.21 and 0.79, condition 2.8: keep it"),
    ("near singular, eigenvalues 2 and 1e-6 rotated by 30 degrees", rotated((2.0, 1e-6), math.pi / 6), 1e5, True,
     "condition 2e6 > 1e5: use the eigenvalues (torch.linalg.eigvalsh), not the diagonal (about 1.5 and 0.5)"),
    ("singular, v v^T with v = (1, 2)", torch.tensor([[1, 2], [2, 4]], dtype=torch.float64), 1e5, True,
     "eigenvalues 5 and 0 (up to round-off): the condition number is infinite, so it goes"),
    ("singular by round-off, diag(1, -1e-17)", torch.diag(torch.tensor([1, -1e-17], dtype=torch.float64)), 1e5, True,
     "largest / smallest is negative here, never above 1e5: a smallest eigenvalue <= 0 means singular, "
     "condition infinite (prune.head_measures clamps it at 0)"),
    ("condition 1e4, diag(1, 1e-4): kept at the paper's 1e5", torch.diag(torch.tensor([1, 1e-4], dtype=torch.float64)),
     1e5, False, "1e4 is not above 1e5: keep it"),
    ("on the condition threshold, diag(1e5, 1): kept", torch.diag(torch.tensor([1e5, 1], dtype=torch.float64)),
     1e5, False, "condition number exactly 1e5 is not above 1e5: A.1's test is >, not >="),
    ("condition 1e4, diag(1, 1e-4): pruned at condition_above=1e3 (the authors' code)",
     torch.diag(torch.tensor([1, 1e-4], dtype=torch.float64)), 1e3, True,
     "use the condition_above you are given, not a constant"),
]


def case_verdict(yours, index: int) -> float:
    """Your verdict (1 pruned, 0 kept) on CASES[index], every case judged in one call at its threshold."""
    inv_cov = torch.stack([case[1] for case in CASES])  # [cases, 2, 2]
    verdict = yours.degenerate(inv_cov, condition_above=CASES[index][2])
    if tuple(verdict.shape) != (len(CASES),):
        raise ValueError(f"shape {list(verdict.shape)}, expected [{len(CASES)}]")
    return float(bool(verdict[index]))


def deep6_verdicts(yours) -> list:
    """Per layer of deep6-e6-s0, the heads your degenerate prunes, given 2 alpha I in float64."""
    model, _, _ = deep6()
    inv_covs = [2 * alpha.double()[:, None, None] * torch.eye(2, dtype=torch.float64) for alpha in alphas(model)]
    return [yours.degenerate(inv_cov).nonzero().flatten().tolist() for inv_cov in inv_covs]


def layers_agreeing(yours) -> int:
    return sum(mine == theirs for mine, theirs in zip(deep6_verdicts(yours), deep6()[2]))


def pruned_parameters(yours) -> int:
    """Your count of deep6-e6-s0 without the heads prune.degenerate_heads finds."""
    model, config, pruned = deep6()
    before = [layer.heads for layer in model.attention_layers]
    after = [heads - len(p) for heads, p in zip(before, pruned)]
    return yours.parameters_after_pruning(count_parameters(model), before, after, config["dim"], 3)


def items(run: str) -> list:
    model, config, pruned = deep6()
    n_pruned = sum(map(len, pruned))
    before, after = count_parameters(model), count_parameters(prune.remove_heads(model, config, pruned)[0])
    gaussian, table_2 = (count_parameters(build_model("gaussian", heads=heads)) for heads in (9, PRUNED))
    hint_inv_cov = ("Sigma^-1 = 2 alpha I, not alpha I: eq. 16 carries a 1/2 that eq. 9 does not; "
                    "alpha[:, None, None] * torch.eye(2) gives [heads, 2, 2]")
    hint_count = ("each pruned head takes dim x dim weights of W_out (its block of input columns; the bias stays, "
                  "it has dim entries, not one per head) and its per_head positional parameters; "
                  "heads_before - heads_after heads go in each layer")
    checks = [
        Item("quadratic_inv_cov(0.5, 2, 1e-6) = I, 4I, 2e-6 I (literal)", literal_error, 0.0, 1e-12, hint_inv_cov),
        Item("eq. 16's logits with your Sigma^-1 = attention.Quadratic's eq. 9 logits (float64, 5 heads, 5x6 grid)",
             logit_error, 0.0, 1e-10, hint_inv_cov + "; the shift is delta - Delta, delta = key - query"),
        Item("largest eigenvalue of your Sigma^-1 = prune.head_measures', deep6-e6-s0's 54 heads (relative)",
             eigenvalue_error, 0.0, 1e-12, hint_inv_cov + " (prune.py's docstring says the same)"),
    ]
    checks += [Item(f"degenerate: {name}", lambda yours, i=i: case_verdict(yours, i), float(pruned_case), 0.0,
                    hint + "; returns bool [heads]")
               for i, (name, _, _, pruned_case, hint) in enumerate(CASES)]
    checks += [
        Item("degenerate on deep6-e6-s0: layers whose pruned heads equal prune.degenerate_heads' (of 6)",
             layers_agreeing, 6.0, 0.0, "per head the largest eigenvalue of 2 alpha I is 2 alpha; one verdict "
                                         "per head, not one per layer"),
        Item(f"degenerate on deep6-e6-s0: heads pruned in all (prune.degenerate_heads: {n_pruned})",
             lambda yours: sum(map(len, deep6_verdicts(yours))), float(n_pruned), 0.0,
             "a quadratic head's condition number is 1; only 2 alpha < 1e-5 prunes it"),
    ]
    # Exact counts are checked as (yours - the project's): the value printed is what is missing or extra.
    checks += [
        Item(f"parameters_after_pruning(deep6-e6-s0: {before:,}, {n_pruned} heads) - count_parameters of "
             f"prune.remove_heads' model ({after:,})",
             lambda yours: pruned_parameters(yours) - after, 0.0, 0.0, hint_count + " (width 64, quadratic: 3)"),
        Item(f"parameters_after_pruning(Table 2: {gaussian:,}, heads {PRUNED}) - count_parameters of that "
             f"network ({table_2:,}; paper: 9.7M)",
             lambda yours: yours.parameters_after_pruning(gaussian, [9] * 6, PRUNED, 400, 6) - table_2, 0.0, 0.0,
             hint_count + " (width 400, gaussian: 6)"),
    ]
    return checks
