"""Day 4's items: A.1's pruning, written where it lives, held to closed forms and literal verdicts.

    python -m exercises.check 4

The functions: prune.head_measures, prune.degenerate_heads and prune.remove_heads. The references
are written out here: 2 alpha for a quadratic head; for Gaussian heads set by hand, the eigenvalues of
a 2 x 2 symmetric matrix in closed form, (a + d)/2 +- sqrt(((a - d)/2)^2 + b^2), in float64. The rule
is held to literal verdicts, with thresholds exactly on the heads' own measures and one float64 step
past them, and to prune.log's verdict on the committed deep6-e6-s0. The pruned model is held to the
original with the pruned heads' blocks of W_out zeroed, and its parameter count to a closed form.
Every input is written out or seeded and every reference is float64, so every CPU gives the same verdicts.
"""
import copy
import math
from pathlib import Path
from types import SimpleNamespace

import torch

import prune
from attention import SelfAttention2d
from exercises.check import Item
from model import model_from_config

WRITE = {"prune.py": ("head_measures", "degenerate_heads", "remove_heads")}
STRETCH = {}

RUN = Path(__file__).resolve().parent.parent / "lab/results/fig2/deep6-e6-s0"
GRID = (4, 6)  # the layers' grid: the measures do not depend on it


def rotation(degrees: float) -> torch.Tensor:
    c, s = math.cos(math.radians(degrees)), math.sin(math.radians(degrees))
    return torch.tensor([[c, -s], [s, c]], dtype=torch.float64)


def diag(*entries) -> torch.Tensor:
    return torch.diag(torch.tensor(entries, dtype=torch.float64))


# The Gaussian heads: each one's S (Sigma^-1 = S S^T), and what A.1's rule makes of it.
S = [
    torch.tensor([[1.5, 0.3], [-0.2, 0.9]], dtype=torch.float64),  # 0: eigenvalues 2.34 and 0.85: kept
    math.sqrt(2e-5) * torch.eye(2, dtype=torch.float64),  # 1: 2e-5 I, condition 1: the eigenvalue probe
    rotation(30) @ diag(1, 1e-2),  # 2: eigenvalues 1 and 1e-4 turned by 30 degrees, condition 1e4: the condition probe
    torch.tensor([[1, 2], [0.5, 1]], dtype=torch.float64),  # 3: singular, [[5, 2.5], [2.5, 1.25]]: always pruned
    torch.zeros(2, 2, dtype=torch.float64),  # 4: Sigma^-1 = 0, a uniform head: always pruned
    rotation(60) @ diag(1e-2, math.sqrt(5e-6)),  # 5: eigenvalues 1e-4 and 5e-6, condition 20: kept
    rotation(-45) @ diag(math.sqrt(2), 1e-3),  # 6: eigenvalues 2 and 1e-6, condition 2e6: pruned at 1e5
    math.sqrt(1e-7) * torch.eye(2, dtype=torch.float64),  # 7: 1e-7 I: pruned at 1e-5
]
EIGENVALUE_PROBE, CONDITION_PROBE = 1, 2
ALPHA = [0.5, 4e-6, 7e-6, 1.5e-5]  # the quadratic heads: 2 alpha = 1, 8e-6, 1.4e-5, 3e-5


def gaussian_layer() -> SelfAttention2d:
    layer = SelfAttention2d(4, heads=len(S), grid=GRID, encoding="gaussian").double()
    with torch.no_grad():
        layer.encoding.inv_cov_sqrt.copy_(torch.stack(S))
    return layer


def quadratic_layer() -> SelfAttention2d:
    layer = SelfAttention2d(4, heads=len(ALPHA), grid=GRID, encoding="quadratic").double()
    layer.encoding.alpha = torch.tensor(ALPHA, dtype=torch.float64)
    return layer


def closed_form() -> tuple:
    """Each Gaussian head's eigenvalues of Sigma^-1 = S S^T = [[a, b], [b, d]] in float64:
    (largest, smallest) lists, (a + d)/2 +- sqrt(((a - d)/2)^2 + b^2)."""
    largest, smallest = [], []
    for s in S:
        (p, q), (r, t) = s.tolist()
        a, b, d = p * p + q * q, p * r + q * t, r * r + t * t
        root = math.sqrt(((a - d) / 2) ** 2 + b * b)
        largest.append((a + d) / 2 + root)
        smallest.append((a + d) / 2 - root)
    return largest, smallest


def measured(layer, key: str):
    """head_measures(layer)[key] as a float64 tensor [heads], or None when it is not one."""
    found = prune.head_measures(layer)
    value = found.get(key) if isinstance(found, dict) else None
    if not isinstance(value, torch.Tensor) or tuple(value.shape) != (layer.heads,):
        return None
    return value.detach().double().cpu()


def relative(found, reference: list) -> float:
    """max over heads of |found - reference| / reference (|found| where the reference is 0); inf when
    head_measures gave no [heads] tensor."""
    if found is None:
        return math.inf
    return max(abs(f - r) / r if r else abs(f) for f, r in zip(found.tolist(), reference))


def quadratic_largest() -> float:
    layer = quadratic_layer()
    return relative(measured(layer, "largest eigenvalue"), [2 * a for a in layer.encoding.alpha.tolist()])


def quadratic_condition() -> float:
    return relative(measured(quadratic_layer(), "condition"), [1.0] * len(ALPHA))


def gaussian_largest() -> float:
    return relative(measured(gaussian_layer(), "largest eigenvalue"), closed_form()[0])


def gaussian_condition() -> float:
    """The finite condition numbers: largest / smallest of the closed form."""
    found, (largest, smallest) = measured(gaussian_layer(), "condition"), closed_form()
    finite = [h for h in range(len(S)) if smallest[h] > 0]
    return relative(found if found is None else found[finite], [largest[h] / smallest[h] for h in finite])


def singular_inf() -> float:
    """How many of the heads whose closed form's smallest eigenvalue is 0 get condition inf."""
    found, smallest = measured(gaussian_layer(), "condition"), closed_form()[1]
    return math.nan if found is None else sum(found[h].item() == math.inf for h in range(len(S)) if smallest[h] == 0)


def probes() -> tuple:
    """The eigenvalue probe's largest eigenvalue and the condition probe's condition number, as
    head_measures gives them: the thresholds set exactly on them."""
    layer = gaussian_layer()
    largest, condition = measured(layer, "largest eigenvalue"), measured(layer, "condition")
    if largest is None or condition is None:
        return math.nan, math.nan
    return largest[EIGENVALUE_PROBE].item(), condition[CONDITION_PROBE].item()


def as_lists(verdict, layers: int):
    """degenerate_heads' answer as sorted lists of ints, or None when it is not a list a layer."""
    try:
        lists = [sorted(int(h) for h in layer) for layer in verdict]
    except (TypeError, ValueError):
        return None
    return lists if len(lists) == layers else None


def misjudged(thresholds, expected: list):
    """The heads of [Gaussian layer, quadratic layer] that degenerate_heads judges otherwise than
    `expected`, at thresholds() = (eigenvalue_below, condition_above)."""
    def measure() -> float:
        eigenvalue_below, condition_above = thresholds()
        if not (math.isfinite(eigenvalue_below) and math.isfinite(condition_above)):
            return math.inf  # head_measures gave no [heads] tensors to set the thresholds on
        model = SimpleNamespace(attention_layers=[gaussian_layer(), quadratic_layer()])
        cfg = prune.Config(eigenvalue_below=eigenvalue_below, condition_above=condition_above)
        found = as_lists(prune.degenerate_heads(model, cfg), 2)
        if found is None:
            return math.inf
        return float(sum(len(set(f) ^ set(e)) for f, e in zip(found, expected)))
    return measure


def deep6():
    """The committed deep6-e6-s0 (6 layers of width 64, 9 quadratic heads each) and its config."""
    checkpoint = torch.load(RUN / "checkpoint.pt", weights_only=True)
    model = model_from_config(checkpoint["config"])
    model.load_state_dict(checkpoint["model"])
    return model, checkpoint["config"]


DEEP6_PRUNED = [[], [6], [1], [], [], []]  # lab/results/commands/prune-day4.log: pruned per layer [0, 1, 1, 0, 0, 0]


def deep6_misjudged() -> float:
    model, _ = deep6()
    found = as_lists(prune.degenerate_heads(model, prune.Config()), 6)
    return math.inf if found is None else float(sum(len(set(f) ^ set(e)) for f, e in zip(found, DEEP6_PRUNED)))


# Small networks to prune: dim 8, heads per layer, the heads each layer loses (first, last, none, several).
NETWORKS = {
    "gaussian": dict(heads=[6, 4, 5], pruned=[[1, 4], [], [0, 2, 4]], per_head=2 + 4),  # a center and S
    "quadratic": dict(heads=[5, 6], pruned=[[0, 3], [5]], per_head=2 + 1),  # a center and sqrt_2alpha
}


def network(encoding: str) -> tuple:
    """A seeded, float32 SelfAttentionNet and its config, as a run's config describes one."""
    spec = NETWORKS[encoding]
    config = dict(encoding=encoding, layers=len(spec["heads"]), heads=spec["heads"], dim=8, ffn_dim=12,
                  dropout=0.1, attention_dropout=0.1, content=False, center_std=2.0, grid_start=False,
                  min_alpha=0.0)
    torch.manual_seed(7)
    model = model_from_config(config)
    with torch.no_grad():
        for attention in model.attention_layers:
            attention.encoding.centers.normal_(0, 2)  # heads that differ
    return model, config


def parameters(model) -> int:
    return sum(p.numel() for p in model.parameters())


def model_of(found):
    """The model of remove_heads' (model, heads), or None when it gave no such pair."""
    if not (isinstance(found, tuple) and len(found) == 2 and isinstance(found[0], torch.nn.Module)):
        return None
    return found[0]


def removed(encoding: str):
    """remove_heads' model of `network(encoding)`, or None."""
    model, config = network(encoding)
    return model_of(prune.remove_heads(model, config, NETWORKS[encoding]["pruned"]))


def output_error(encoding: str):
    """max |pruned model(x) - the original with the pruned heads' W_out input blocks zeroed (x)|, float64, eval."""
    def measure() -> float:
        small = removed(encoding)
        if small is None:
            return math.inf
        reference, _ = network(encoding)
        reference = copy.deepcopy(reference).double().eval()
        with torch.no_grad():
            for layer, drop in zip(reference.attention_layers, NETWORKS[encoding]["pruned"]):
                W = layer.W_out.weight.view(layer.W_out.out_features, layer.heads, layer.dim)  # [out, heads, dim]
                W[:, drop] = 0
            x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(8), dtype=torch.float64)
            found = small.double().eval()(x)
            return (found - reference(x)).abs().max().item() if found.shape == (2, 10) else math.inf
    return measure


def parameter_error(encoding: str):
    """count of remove_heads' model - (count before - per pruned head: its positional parameters + dim x dim)."""
    def measure() -> float:
        small, (model, _) = removed(encoding), network(encoding)
        if small is None:
            return math.inf
        spec = NETWORKS[encoding]
        gone = sum(map(len, spec["pruned"])) * (spec["per_head"] + 8 * 8)
        return float(parameters(small) - (parameters(model) - gone))
    return measure


def deep6_parameters() -> float:
    model, config = deep6()
    small = model_of(prune.remove_heads(model, config, DEEP6_PRUNED))
    return math.inf if small is None else float(parameters(small))


def items(run: str) -> list:
    hint_quadratic = ("a quadratic head's Sigma^-1 is 2 alpha I (prune.py's docstring): eq. 16 carries a 1/2 that "
                      "eq. 15 does not; return float64 tensors [heads] under the keys 'largest eigenvalue' and "
                      "'condition'")
    hint_eigen = ("torch.linalg.eigvalsh gives a symmetric matrix's eigenvalues in ascending order; the diagonal "
                  "is not them once Sigma^-1 is turned; compute in float64")
    next_up, next_down = (lambda v: math.nextafter(v, math.inf)), (lambda v: math.nextafter(v, 0))
    checks = [
        Item("prune.head_measures: largest eigenvalue of 2 alpha I, 4 quadratic heads, alpha 0.5 to 4e-6 (relative)",
             quadratic_largest, 0.0, 1e-12, hint_quadratic),
        Item("prune.head_measures: condition number 1 for the same 4 quadratic heads",
             quadratic_condition, 0.0, 1e-12, hint_quadratic),
        Item("prune.head_measures: largest eigenvalue of 8 Gaussian heads' S S^T against the 2 x 2 closed form "
             "(relative, float64)", gaussian_largest, 0.0, 1e-12, hint_eigen),
        Item("prune.head_measures: condition number of the 6 non-singular Gaussian heads against the closed form "
             "(relative; up to 2e6)", gaussian_condition, 0.0, 1e-8,
             hint_eigen + "; the condition number is the largest eigenvalue over the smallest"),
        Item("prune.head_measures: condition inf for the singular [[5, 2.5], [2.5, 1.25]] and for Sigma^-1 = 0 "
             "(heads that get it)", singular_inf, 2.0, 0.0,
             "a smallest eigenvalue of 0, or below 0 by round-off, means singular: condition inf, not nan "
             "(0 / 0) nor a negative number"),
    ]
    expected = {  # the Gaussian layer's pruned heads, then the quadratic layer's
        "at exactly head 1's largest eigenvalue and head 2's condition number: both kept": (
            probes, [[3, 4, 6, 7], [1, 2]]),
        "at the next float64 above head 1's largest eigenvalue: head 1 goes": (
            lambda: (next_up(probes()[0]), probes()[1]), [[1, 3, 4, 6, 7], [1, 2]]),
        "at the next float64 below head 2's condition number: head 2 goes": (
            lambda: (probes()[0], next_down(probes()[1])), [[2, 3, 4, 6, 7], [1, 2]]),
        "the paper's 1e-5 and 1e5": (lambda: (1e-5, 1e5), [[3, 4, 6, 7], [1]]),
    }
    hint_rule = ("A.1 prunes a largest eigenvalue below (<) eigenvalue_below or a condition number above (>) "
                 "condition_above: on a threshold a head stays; judge the largest eigenvalue, not the smallest; "
                 "a quadratic head's is 2 alpha")
    for name, (thresholds, verdict) in expected.items():
        checks.append(Item(f"prune.degenerate_heads {name}: heads judged otherwise than {verdict}",
                           misjudged(thresholds, verdict), 0.0, 0.0, hint_rule))
    checks.append(Item(f"prune.degenerate_heads on the committed deep6-e6-s0: heads judged otherwise than "
                       f"prune.log's {DEEP6_PRUNED}", deep6_misjudged, 0.0, 0.0,
                       hint_rule + "; one list per layer of model.attention_layers, [] where none goes"))
    hint_remove = ("each pruned head takes its entry of every encoding parameter and its block of dim input columns "
                   "of W_out (columns h * dim to (h + 1) * dim, its W^(h)); the bias stays; return (model, heads)")
    for encoding, spec in NETWORKS.items():
        checks += [
            Item(f"prune.remove_heads, {encoding} heads {spec['heads']} less {spec['pruned']}: max |pruned model - "
                 f"the original with those W_out blocks zeroed| (float64)", output_error(encoding), 0.0, 1e-12,
                 hint_remove),
            Item(f"prune.remove_heads, {encoding}: parameters - (before - {len(sum(spec['pruned'], []))} x "
                 f"({spec['per_head']} positional + 8 x 8 of W_out))", parameter_error(encoding), 0.0, 0.0,
                 hint_remove),
        ]
    checks.append(Item("prune.remove_heads on deep6-e6-s0 less prune.log's heads: parameters (prune.log: 340,966)",
                       deep6_parameters, 340_966.0, 0.0, hint_remove))
    return checks
