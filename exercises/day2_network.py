"""Day 2, the network: your functions (paper section 4.1, Tables 1-2, eqs. 9 and 11).

Write the four functions below (replace `raise NotImplementedError`); the last one,
separable_probs, is an optional stretch goal. Then, from the project's root:

    python -m exercises.check 2

The handout is exercises/day2_network.md. Conventions are attention.py's: a shift is
delta = key - query as (row, col), tokens are pixels in row-major order, P[h, q, k].
Write these from the paper and the shapes in model.py and attention.py; do not call model.py
or attention.py here (the check holds your functions to them).
"""
import torch


def space_to_depth(images: torch.Tensor) -> torch.Tensor:
    """Section 4.1's 2x2 invertible downsampling (Jacobsen et al., 2018): [B, 3, 32, 32] -> [B, 16, 16, 12].

    Token (i, j) holds the 2 x 2 block of pixels (2i + di, 2j + dj), di, dj in {0, 1}, of every
    color c, as channel (2 * di + dj) * C + c: the block's pixels row-major, the colors inner. Any
    [B, C, H, W] with H and W even works the same way: [B, H/2, W/2, 4C]. Nothing is learned.
    """
    raise NotImplementedError


def attention_parameters(dim: int, heads: int, encoding: str) -> int:
    """The parameters of one attention layer (attention.SelfAttention2d) of width `dim`, from its shapes.

    Eq. 11 folds each head's W_val^(h) and its block of W_out into one dim x dim matrix W^(h), so
    the value maps are one Linear(heads * dim, dim) (with a bias). Positional parameters per head:
    quadratic, a center Delta (2) and alpha (1); gaussian, a center (2) and Sigma^-1/2 (2 x 2).
    learned (section 4.3): a row and a column table of the 2 * 16 - 1 = 31 shifts of the 16 x 16
    token grid, each `dim` wide (attention.RowColumn), and per head its vectors v_row and v_col
    (`dim` each). Returns an int.
    """
    raise NotImplementedError


def network_parameters(encoding: str, layers: int = 6, heads=9, dim: int = 400, ffn_dim: int = 512) -> int:
    """The parameters of section 4.1's network (model.SelfAttentionNet), from its shapes.

    Linear(12, dim) embeds each token; each of `layers` post-LN blocks holds the attention layer
    (attention_parameters), Linear(dim, dim) after it, a LayerNorm (weight and bias), the FFN
    Linear(dim, ffn_dim) and Linear(ffn_dim, dim), and a second LayerNorm; Linear(dim, 10)
    classifies the mean token. Every Linear has a bias. `heads` is one number for every layer or
    a list, one per layer (a pruned model, Table 2). Returns an int: Table 1's 12.1M for quadratic.
    """
    raise NotImplementedError


def paper_flops(dim: int = 400, ffn_dim: int = 512, heads=9, layers: int = 6, tokens: int = 256) -> int:
    """FLOPs per image as Tables 1-2 count them: 2 x the multiply-adds of the Linear layers only.

    A Linear(n_in, n_out) applied to n vectors costs n * n_in * n_out multiply-adds. Count the
    embedding Linear(12, dim) on every token, per block the value maps Linear(heads * dim, dim),
    Linear(dim, dim) and the FFN on every token, and the classifier Linear(dim, 10) once (it acts
    on the mean token). The attention product P_h X itself is not counted, nor softmax, LayerNorm,
    GELU or biases. `heads` as in network_parameters. Returns an int: 6.18e9 for section 4.1's network.
    """
    raise NotImplementedError


# Stretch goal (optional). The check says SKIP until you write it; a SKIP never fails the day.

def separable_probs(centers: torch.Tensor, alpha: torch.Tensor, H: int, W: int) -> torch.Tensor:
    """Quadratic heads' probabilities over an H x W grid, built from one row and one column softmax.

    centers [heads, 2] (row, col), alpha [heads]. Eq. 9's logit -alpha ||delta - Delta||^2 is
    -alpha (delta_row - Delta_row)^2 - alpha (delta_col - Delta_col)^2, a row term plus a column
    term, so the softmax over the H * W keys factorizes: P[h, (a, b), (c, d)] = P_row[h, a, c] *
    P_col[h, b, d], with P_row [heads, H, H] the softmax over key rows c of the row term at
    delta_row = c - a, P_col [heads, W, W] the same along columns. Build P_row and P_col, then their
    outer product: returns P [heads, H * W, H * W], query (a, b) at index a * W + b, in centers' dtype.
    """
    raise NotImplementedError
