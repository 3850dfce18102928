"""Day 1, Theorem 1 by hand: your functions (paper section 3, eqs. 9-13, Lemmas 1-2).

Write each function below (replace `raise NotImplementedError`), then from the project's root:

    python -m exercises.check 1

The handout is exercises/day1_theorem.md. Conventions are attention.py's: a shift is
delta = key - query as (row, col), tokens are pixels in row-major order, P[h, q, k].
Write these from the equations with torch; do not call attention.py or prove.py here
(the check holds your functions to them).
"""
import torch


def quadratic_logits(delta: torch.Tensor, center: torch.Tensor, alpha: float) -> torch.Tensor:
    """Eq. 9 for one head, in this project's k - q convention: -alpha * ||delta - center||^2.

    delta [..., 2]: shifts key - query as (row, col); center [2]: the head's Delta (row, col);
    alpha: the head's width, > 0. Returns the logits [...] (delta's shape without its last axis).

    The paper writes the logit as v^T r_delta with v = -alpha (1, -2 Delta_1, -2 Delta_2) and
    r_delta = (||delta||^2, delta_1, delta_2), which expands to -alpha (||delta - Delta||^2 - ||Delta||^2)
    (eq. 14, c = -||Delta||^2). So this function returns v^T r_delta - alpha ||Delta||^2: a constant
    that is the same for every key, so the softmax over the keys (the probabilities) is the same.
    """
    raise NotImplementedError


def conv_heads(weight: torch.Tensor) -> tuple:
    """Lemma 1 / eq. 11: the K^2 heads of the attention layer that computes a K x K convolution.

    weight [C_out, C_in, K, K] (an nn.Conv2d's, K odd) -> (centers [K^2, 2], W [K^2, C_in, C_out]).
    Head h = i * K + j (row-major over the kernel) takes kernel entry (i, j): its center is the
    shift that entry multiplies, delta = (i - K//2, j - K//2) (F.conv2d is a cross-correlation:
    output pixel q reads input pixel q + delta), and its value map W^(h) is that slice of the
    kernel, weight[:, :, i, j] transposed to [C_in, C_out], so that a token (a row vector x_k
    [C_in]) maps to x_k W^(h) [C_out] as in eq. 12. Same dtype as weight.
    """
    raise NotImplementedError


def mhsa_conv(x: torch.Tensor, centers: torch.Tensor, W: torch.Tensor, alpha: float) -> torch.Tensor:
    """Eq. 12: the position-only multi-head layer with quadratic heads and value maps W^(h), no bias.

    x [B, C_in, rows, cols]; centers [heads, 2] and W [heads, C_in, C_out] as conv_heads returns
    them, heads = K^2; alpha: every head's width. Returns [B, C_out, rows, cols].

    Borders as prove.py: the keys are x padded with K//2 rings of zero tokens (F.pad), so the grid
    has T = (rows + 2 (K//2)) * (cols + 2 (K//2)) tokens; output is kept for the original pixels.
    Write it densely from the equations: each head's logits at every (query, key) pair's shift
    (quadratic_logits), P_h = softmax over keys [T, T], then
    MHSA(X)_q = sum_h (sum_k P_h[q, k] X_k) W^(h).
    As alpha grows, P_h[q, :] tends to one-hot on the key q + Delta^(h) (Lemma 2) and this is
    F.conv2d(x, weight, padding=K//2) (eq. 13).
    """
    raise NotImplementedError


def off_center_mass(alpha: float) -> float:
    """Lemma 2 quantified: the probability a quadratic head puts off its center, far from borders.

    For a head centred on an integer shift Delta and a query far from the image's borders (the
    grid as good as infinite), P[q, q + Delta + m] = exp(-alpha ||m||^2) / Z over m in Z^2, and
    Z = theta(alpha)^2 with theta(alpha) = sum over all integers n of exp(-alpha n^2) (the logit
    is a row term plus a column term). Returns the mass, 1 - 1 / theta(alpha)^2, as a float in float64;
    question 3 asks how you compute it.
    """
    raise NotImplementedError
