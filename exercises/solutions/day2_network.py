"""Day 2's reference solutions (exercises/day2_network.py's functions, written).

    python -m exercises.check 2 --solutions
"""
import torch

TABLE_ROWS = 2 * 16 - 1  # shifts -15..15 along each axis of the 16 x 16 token grid


def space_to_depth(images: torch.Tensor) -> torch.Tensor:
    """The four pixels of each 2 x 2 block, row-major, colors inner: [B, C, H, W] -> [B, H/2, W/2, 4C]."""
    blocks = [images[:, :, di::2, dj::2] for di in (0, 1) for dj in (0, 1)]  # 4 x [B, C, H/2, W/2]
    x = torch.stack(blocks, dim=-1)  # [B, C, H/2, W/2, 4]
    return x.permute(0, 2, 3, 4, 1).flatten(3)  # [B, H/2, W/2, 4, C] -> [B, H/2, W/2, 4C]


def linear(n_in: int, n_out: int) -> int:
    return n_in * n_out + n_out


def attention_parameters(dim: int, heads: int, encoding: str) -> int:
    """W_out = Linear(heads * dim, dim) (eq. 11's W^(h) folded), plus the encoding's parameters."""
    if encoding == "quadratic":
        positional = heads * (2 + 1)  # Delta, alpha
    elif encoding == "gaussian":
        positional = heads * (2 + 2 * 2)  # Delta, Sigma^-1/2
    elif encoding == "learned":
        positional = 2 * TABLE_ROWS * dim + heads * 2 * dim  # r_row and r_col; each head's v_row and v_col
    else:
        raise ValueError(f"no count for encoding {encoding!r}")
    return linear(heads * dim, dim) + positional


def network_parameters(encoding: str, layers: int = 6, heads=9, dim: int = 400, ffn_dim: int = 512) -> int:
    """Embedding, blocks (attention, Linear(dim, dim), FFN, two LayerNorms) and classifier."""
    heads = [heads] * layers if isinstance(heads, int) else list(heads)
    block = linear(dim, dim) + linear(dim, ffn_dim) + linear(ffn_dim, dim) + 2 * (2 * dim)
    blocks = sum(attention_parameters(dim, h, encoding) + block for h in heads)
    return linear(12, dim) + blocks + linear(dim, 10)


def separable_probs(centers: torch.Tensor, alpha: torch.Tensor, H: int, W: int) -> torch.Tensor:
    """P_h = P_h^row (x) P_h^col from eq. 9's row and column terms: [heads, H * W, H * W]."""
    def axis_probs(n: int, axis: int) -> torch.Tensor:  # [heads, n, n]
        pos = torch.arange(n, dtype=centers.dtype)
        delta = pos[None, :] - pos[:, None]  # [n, n]: key - query along the axis
        return (-alpha[:, None, None] * (delta - centers[:, axis, None, None]) ** 2).softmax(-1)

    P = torch.einsum("hac,hbd->habcd", axis_probs(H, 0), axis_probs(W, 1))  # [heads, H, W, H, W]
    return P.reshape(len(centers), H * W, H * W)


def paper_flops(dim: int = 400, ffn_dim: int = 512, heads=9, layers: int = 6, tokens: int = 256) -> int:
    """2 x multiply-adds of the Linear layers, per image; P_h X not counted."""
    heads = [heads] * layers if isinstance(heads, int) else list(heads)
    per_token = sum(h * dim * dim + dim * dim + 2 * dim * ffn_dim for h in heads)  # W_out, Linear(dim, dim), FFN
    return 2 * (tokens * (12 * dim + per_token) + dim * 10)
