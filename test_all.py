"""The test suite: `python -m pytest -q test_all.py` (a few minutes on a 2-core CPU).

Every fast path is held to an independent reference: the dense equations, F.conv2d,
eq. 15 written out here, the paper's tables for parameter counts.
"""
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import attention
import model as model_lib
import prove
from attention import ENCODINGS, SelfAttention2d

torch.set_num_threads(min(2, torch.get_num_threads()))


def randomized(layer: nn.Module, seed: int = 0) -> nn.Module:
    """Move every parameter off its initialization, so no test passes by symmetry."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in layer.parameters():
            p.add_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.5)
    return layer


def pair(encoding, grid, heads=4, dim=6, content=False, dropout=0.0):
    """The same layer twice, fast and dense, sharing one state_dict (float64)."""
    torch.manual_seed(0)
    fast = randomized(SelfAttention2d(dim, heads, grid, encoding, content, dropout, impl="fast")).double()
    dense = SelfAttention2d(dim, heads, grid, encoding, content, dropout, impl="dense").double()
    dense.load_state_dict(fast.state_dict())
    return fast, dense


def grads(layer, x, g):
    x = x.clone().requires_grad_()
    out = layer(x)
    (out * g).sum().backward()
    return out, x.grad, {n: p.grad for n, p in layer.named_parameters()}


# ---- attention.py: fast == dense, probabilities, eq. 15 ----------------------------------

@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("grid", [(5, 7), (1, 9), (4, 4)])
@pytest.mark.parametrize("content", [False, True])
def test_fast_equals_dense(encoding, grid, content):
    fast, dense = pair(encoding, grid, content=content)
    x = torch.randn(3, *grid, 6, dtype=torch.float64)
    g = torch.randn(3, *grid, 6, dtype=torch.float64)
    out_f, dx_f, dp_f = grads(fast, x, g)
    out_d, dx_d, dp_d = grads(dense, x, g)
    torch.testing.assert_close(out_f, out_d)
    torch.testing.assert_close(dx_f, dx_d)
    assert dp_f.keys() == dp_d.keys()
    for name in dp_f:
        torch.testing.assert_close(dp_f[name], dp_d[name], msg=name)
    assert fast.state_dict().keys() == dense.state_dict().keys()


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_probabilities_fast_equal_dense_and_sum_to_one(encoding):
    fast, dense = pair(encoding, (5, 7))
    P = fast.attention_probs()
    assert P.shape == (4, 35, 35)
    torch.testing.assert_close(P, dense.attention_probs())
    torch.testing.assert_close(P.sum(-1), torch.ones(4, 35, dtype=torch.float64))
    assert (P >= 0).all()


def test_content_probabilities_have_batch_dim_and_depend_on_x():
    fast, _ = pair("learned", (4, 5), content=True)
    x = torch.randn(2, 4, 5, 6, dtype=torch.float64)
    P = fast.attention_probs(x)
    assert P.shape == (2, 4, 20, 20)
    torch.testing.assert_close(P.sum(-1), torch.ones(2, 4, 20, dtype=torch.float64))
    assert not torch.allclose(P[0], P[1])


def test_quadratic_probabilities_match_eq15():
    """softmax(A_q,:)_k = exp(-alpha ||(k - q) - Delta||^2) / sum_k' ..., written out by hand."""
    H, W = 4, 6
    layer, _ = pair("quadratic", (H, W), heads=3)
    centers = layer.encoding.centers.detach()
    alpha = layer.encoding.alpha.detach()
    P = layer.attention_probs()
    for h in range(3):
        for q in range(H * W):
            qi, qj = divmod(q, W)
            scores = torch.tensor([math.exp(-alpha[h] * ((ki - qi - centers[h, 0]) ** 2 + (kj - qj - centers[h, 1]) ** 2))
                                   for ki in range(H) for kj in range(W)], dtype=torch.float64)
            torch.testing.assert_close(P[h, q], scores / scores.sum())


def test_gaussian_inv_cov_is_S_S_transpose_and_matches_eq16():
    layer, _ = pair("gaussian", (3, 3), heads=2)
    S = layer.encoding.inv_cov_sqrt.detach()
    inv_cov = layer.encoding.inv_cov.detach()
    torch.testing.assert_close(inv_cov, S @ S.transpose(1, 2))
    delta = torch.tensor([1.0, -2.0], dtype=torch.float64)
    d = delta - layer.encoding.centers.detach()[1]
    expected = -0.5 * d @ inv_cov[1] @ d
    torch.testing.assert_close(layer.encoding.logits(delta)[1], expected)


def test_probabilities_are_position_only_and_shift_equivariant():
    """A relative encoding: P[h, q, k] depends on k - q only, away from the borders."""
    layer, _ = pair("learned", (6, 6), heads=2)
    P = layer.attention_probs().view(2, 6, 6, 6, 6)
    logits = P.log()
    # differences of log-probabilities for the same shifts from two queries are equal
    a = logits[:, 2, 2, 2:5, 2:5] - logits[:, 2, 2, 3, 3][:, None, None]
    b = logits[:, 3, 3, 3:6, 3:6] - logits[:, 3, 3, 4, 4][:, None, None]
    torch.testing.assert_close(a, b)


def test_learned_layer_parameters_match_section_4_3():
    layer = SelfAttention2d(400, 9, (16, 16), "learned")
    sizes = {n: tuple(p.shape) for n, p in layer.encoding.named_parameters()}
    assert sizes == {"r_row": (31, 400), "r_col": (31, 400), "u": (9, 400), "w": (9, 400)}


def test_sinusoidal_tables_are_fixed():
    layer = SelfAttention2d(8, 2, (3, 3), "sinusoidal")
    names = {n for n, _ in layer.named_parameters()}
    assert "encoding.r_row" not in names and "encoding.u" in names
    table = layer.encoding.r_row  # shifts -2..2, dim 8: sin then cos of shift * 10000^(-2i/8)
    torch.testing.assert_close(table[3, 0], torch.tensor(math.sin(1.0)))
    torch.testing.assert_close(table[3, 4], torch.tensor(math.cos(1.0)))


def test_dropout_on_probabilities_still_matches_dense_in_eval():
    fast, dense = pair("quadratic", (4, 4), dropout=0.5)
    x = torch.randn(2, 4, 4, 6, dtype=torch.float64)
    fast.eval(), dense.eval()
    torch.testing.assert_close(fast(x), dense(x))
    fast.train()
    assert not fast.separable  # dropout on P breaks the factorization: the full product is used


# ---- bad inputs ----------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, match", [
    (dict(dim=0), "dim must be a positive integer"),
    (dict(heads=2.5), "heads must be a positive integer"),
    (dict(encoding="rotary"), "unknown encoding 'rotary'"),
    (dict(impl="cuda"), "unknown impl"),
    (dict(grid=(16,)), "grid must be two positive integers"),
])
def test_bad_layer_arguments(kwargs, match):
    args = dict(dim=8, heads=4, grid=(4, 4)) | kwargs
    with pytest.raises(ValueError, match=match):
        SelfAttention2d(**args)


def test_input_of_wrong_grid_or_dim_is_refused():
    layer = SelfAttention2d(8, 4, (4, 5))
    with pytest.raises(ValueError, match=r"expected input \[B, 4, 5, 8\], got \[2, 5, 4, 8\]"):
        layer(torch.randn(2, 5, 4, 8))
    with pytest.raises(ValueError, match="expected input"):
        layer(torch.randn(2, 4, 5, 7))
    with pytest.raises(ValueError, match="learned tables are sized for grid"):
        SelfAttention2d(8, 4, (4, 5), "learned").set_grid((6, 6))


def test_non_square_heads_refused_for_a_kernel():
    with pytest.raises(ValueError, match="square number of heads, got heads=8"):
        attention.kernel_shifts(8)
    assert attention.kernel_shifts(9).tolist()[:2] == [[-1, -1], [-1, 0]]


@pytest.mark.parametrize("conv, match", [
    (nn.Conv2d(3, 4, 3, stride=2, padding=1), "stride"),
    (nn.Conv2d(3, 4, 3, dilation=2, padding=1), "dilation"),
    (nn.Conv2d(3, 4, 3, padding=0), "padding"),
    (nn.Conv2d(4, 4, 3, padding=1, groups=2), "groups"),
    (nn.Conv2d(3, 4, 2, padding=1), "even kernel"),
    (nn.Conv2d(3, 4, 3, padding=1, padding_mode="reflect"), "padding_mode"),
])
def test_conv_outside_the_construction_is_refused(conv, match):
    with pytest.raises(ValueError, match=match):
        prove.conv_to_attention(conv, alpha=10.0)
    with pytest.raises(TypeError):
        prove.conv_to_attention(nn.Linear(3, 3), alpha=10.0)


# ---- prove.py: Theorem 1 against F.conv2d ----------------------------------------------------

@pytest.mark.parametrize("K", [3, 5])
@pytest.mark.parametrize("channels", [(3, 5), (7, 2)])
def test_attention_reproduces_conv2d_at_large_alpha(K, channels):
    torch.manual_seed(K)
    c_in, c_out = channels
    conv = nn.Conv2d(c_in, c_out, K, padding=K // 2)
    x = torch.randn(2, c_in, 9, 11)
    expected = F.conv2d(x, conv.weight, conv.bias, padding=K // 2)  # borders included
    layer = prove.conv_to_attention(conv, alpha=50.0)
    torch.testing.assert_close(layer(x), expected, atol=1e-5, rtol=1e-5)
    far = (prove.conv_to_attention(conv, alpha=1.0)(x) - expected).abs().max()
    assert far > 1e-2  # small alpha is not a convolution: the test can fail


def test_attention_reproduces_conv1d_and_conv_without_bias():
    torch.manual_seed(0)
    conv1d = nn.Conv1d(3, 4, 5, padding=2)
    x = torch.randn(2, 3, 17)
    torch.testing.assert_close(prove.conv_to_attention(conv1d, 50.0)(x), conv1d(x), atol=1e-5, rtol=1e-5)
    assert prove.conv_to_attention(conv1d, 50.0).attention.encoding.centers[:, 0].abs().max() == 0  # D_p = 2
    conv = nn.Conv2d(2, 3, 3, padding="same", bias=False)
    x = torch.randn(1, 2, 6, 6)
    torch.testing.assert_close(prove.conv_to_attention(conv, 50.0)(x), conv(x), atol=1e-5, rtol=1e-5)


def test_theorem_error_falls_like_exp_minus_alpha():
    torch.manual_seed(0)
    conv = nn.Conv2d(2, 2, 3, padding=1).double()
    x = torch.randn(1, 2, 8, 8, dtype=torch.float64)
    errors = [(prove.conv_to_attention(conv, a)(x) - conv(x)).abs().max().item() for a in (5, 10, 15)]
    assert errors[0] > errors[1] > errors[2]
    ratio = math.log(errors[0] / errors[1]) / 5  # slope of log error per unit of alpha
    assert 0.8 < ratio < 1.2


# ---- model.py: the paper's parameter counts and FLOPs ----------------------------------------

@pytest.mark.parametrize("name, params", [
    ("quadratic", 12_086_844), ("gaussian", 12_087_006), ("learned", 12_278_682), ("resnet18", 11_173_962)])
def test_parameter_counts_match_design_and_paper(name, params):
    model = model_lib.build_model(name)
    assert model_lib.count_parameters(model) == params
    paper = model_lib.PAPER[name][0]
    assert round(params / 1e6, 1) == paper / 1e6


def test_pruned_gaussian_parameter_count():
    model = model_lib.build_model("gaussian", heads=[9 - n for n in (2, 4, 1, 2, 6, 0)])
    assert model_lib.count_parameters(model) == 9_686_916


@pytest.mark.parametrize("name", ["quadratic", "resnet18"])
def test_paper_convention_flops_within_one_percent(name):
    flops = model_lib.paper_flops(model_lib.build_model(name))
    assert abs(flops / model_lib.PAPER[name][1] - 1) < 0.01


def test_fast_path_counts_fewer_flops_than_dense():
    model = model_lib.build_model("quadratic", layers=1)
    fast = model_lib.counted_flops(model)
    model_lib.set_impl(model, "dense")
    dense = model_lib.counted_flops(model)
    attention_dense = 2 * 9 * 256 * 256 * 400  # the T x T product of one layer
    assert dense - fast > 0.8 * attention_dense


def test_space_to_depth_is_a_permutation():
    x = torch.arange(2 * 3 * 4 * 6.0).view(2, 3, 4, 6)
    y = model_lib.space_to_depth(x)
    assert y.shape == (2, 2, 3, 12)
    assert sorted(y.flatten().tolist()) == sorted(x.flatten().tolist())
    assert y[0, 1, 2].tolist() == [x[0, c, 2 + dy, 4 + dx].item() for dy in (0, 1) for dx in (0, 1) for c in range(3)]


@pytest.mark.parametrize("name", ["quadratic", "sinusoidal", "resnet18"])
def test_models_classify_a_batch(name):
    model = model_lib.build_model(name, **({} if name == "resnet18" else dict(layers=2, dim=32, ffn_dim=48, heads=4)))
    logits = model(torch.randn(3, 3, 32, 32))
    assert logits.shape == (3, 10) and torch.isfinite(logits).all()


def test_bad_model_arguments():
    with pytest.raises(ValueError, match="unknown model 'vgg'"):
        model_lib.build_model("vgg")
    with pytest.raises(ValueError, match="heads lists 2 layers"):
        model_lib.build_model("quadratic", heads=[9, 9])
