"""Multi-head self-attention over a pixel grid with relative positional encodings.

Paper sections 2-3 (eqs. 1-14), A.1 (eqs. 15-16) and 4.3. `python attention.py` runs every
encoding through the paper's layer and the fast one. It prints their largest difference,
which is float32 round-off (0 to 4e-7).

Conventions, used in every file of this project:
- Tokens are the pixels of an H x W grid in row-major order (T = H * W).
  A layer maps `[B, H, W, D]` to `[B, H, W, D_out]`.
- A shift is `delta = key - query` as (row, col). A head centred at `Delta = (0, 1)` attends
  to the pixel right of the query. The paper writes `q - k` in eqs. 8-9 and Lemmas 1-2, and
  `k - q` in section 4.3 and A.1. We use `k - q` everywhere: only a head's Delta flips sign.
- The paper's N(mu, S) has covariance S. Its N(0, 2I) for the centers (section 4.2) means
  standard deviation 1.41; A.1's Sigma^-1/2 = I + N(0, 0.01 I) means 0.1.
- We follow the authors' code instead: centers with standard deviation 2 (`center_std=2.0`),
  Sigma^-1/2 perturbed by 0.01. `--center-std 1.414` (the laptop preset's) gives the paper's centers.
- Probabilities are `P[h, q, k]` (heads x queries x keys). Logits depend on positions only,
  unless `content=True` adds the data term of eq. 8.

Each head h has its own value map `W^(h)`, D x D_out. Eq. 11 folds `W_val^(h)` and the h-th
block of `W_out` into it, so the layer holds one `Linear(heads * D, D_out)`.

Reading order: the encodings (eqs. 9, 15, 16, section 4.3), then `SelfAttention2d`, the
layer as the paper writes it. Its `forward` is eq. 12 over the full T x T probabilities.
Below the first `# ----` line, skipped on a first reading: the same layer in fewer operations
(what train.py runs), an MLP encoding of ours, and the checks of a layer's arguments.
"""
import math

import torch
from torch import nn

from runtime import command_line

ENCODINGS = ("quadratic", "gaussian", "learned", "sinusoidal", "mlp")


def kernel_shifts(heads: int) -> torch.Tensor:
    """The K x K shifts of a K x K kernel (the set Delta_K of eq. 5), for heads = K^2: [heads, 2]."""
    K = math.isqrt(heads)
    if K * K != heads:
        raise ValueError(f"a K x K kernel needs a square number of heads, got heads={heads}")
    r = torch.arange(K) - K // 2
    return torch.cartesian_prod(r, r).float()


def pairwise_shifts(H: int, W: int) -> torch.Tensor:
    """delta = key - query for every (query, key) pair of the H x W grid: [T, T, 2]."""
    pos = torch.cartesian_prod(torch.arange(H), torch.arange(W)).float()  # [T, 2] row-major
    return pos[None, :, :] - pos[:, None, :]


def shift_table(H: int, W: int) -> torch.Tensor:
    """Every distinct shift, rows -(H-1)..H-1 by cols -(W-1)..W-1: [2H-1, 2W-1, 2]."""
    rows = torch.arange(-(H - 1), H).float()
    cols = torch.arange(-(W - 1), W).float()
    return torch.stack(torch.meshgrid(rows, cols, indexing="ij"), dim=-1)


class Quadratic(nn.Module):
    """The quadratic encoding (eq. 9), in A.1's form: eq. 15's logit -alpha ||delta - Delta||^2.
    One center Delta and one alpha per head. alpha is an inverse width: the larger alpha, the
    narrower the head.

    alpha = min_alpha + sqrt_2alpha^2 / 2 is positive by construction. sqrt_2alpha starts at
    1 + 0.01 N(0, 1), so alpha starts near 0.5, as in the authors' code. `min_alpha` (default 0)
    is a floor of ours, saved with the weights: a head cannot widen past it."""

    separable = True  # the logits are a row term plus a column term
    undecayed = ("centers", "sqrt_2alpha")  # the authors' code: no weight decay on centers and alpha
    spread = ("sqrt_2alpha",)  # what sets how far a head spreads (train.py's --spread-hold)

    def __init__(self, heads: int, center_std: float = 2.0, min_alpha: float = 0.0):
        super().__init__()
        self.centers = nn.Parameter(torch.randn(heads, 2) * center_std)  # Delta ~ N(0, std^2 I)
        self.sqrt_2alpha = nn.Parameter(1.0 + 0.01 * torch.randn(heads))
        self.register_buffer("min_alpha", torch.tensor(float(min_alpha)))

    @property
    def alpha(self) -> torch.Tensor:
        return self.min_alpha + self.sqrt_2alpha**2 / 2

    @alpha.setter
    def alpha(self, value):  # a number, or one a head
        with torch.no_grad():
            value = torch.as_tensor(value, dtype=self.sqrt_2alpha.dtype, device=self.sqrt_2alpha.device)
            root = (2 * (value - self.min_alpha)).clamp(min=0).sqrt()  # below the floor: the floor
            self.sqrt_2alpha.copy_(root.expand_as(self.sqrt_2alpha))

    def logits(self, delta: torch.Tensor) -> torch.Tensor:
        """Each head's logit at each shift, the exponent of eq. 15: delta [..., 2] -> [heads, ...].
        delta is key - query as (row, col); the logits take delta's dtype and device."""
        d = delta[None] - self.centers.view(-1, *[1] * (delta.dim() - 1), 2)
        return -self.alpha.view(-1, *[1] * (delta.dim() - 1)) * (d**2).sum(-1)

    def axis_logits(self, delta, axis):  # 1-D shifts [...] along axis -> [heads, ...]
        view = (-1, *[1] * delta.dim())
        return -self.alpha.view(view) * (delta[None] - self.centers[:, axis].view(view)) ** 2


class Gaussian(nn.Module):
    """Eq. 16: logit = -1/2 (delta - Delta)^T Sigma^-1 (delta - Delta), Sigma^-1 = S S^T (A.1)."""

    separable = False  # the cross term of Sigma^-1 couples rows and columns
    undecayed = ("centers", "inv_cov_sqrt")  # the authors' code: no weight decay on centers and Sigma^-1/2
    spread = ("inv_cov_sqrt",)  # what sets how far a head spreads: Sigma^-1/2, an inverse width

    def __init__(self, heads: int, center_std: float = 2.0):
        super().__init__()
        self.centers = nn.Parameter(torch.randn(heads, 2) * center_std)  # Delta ~ N(0, center_std^2 I)
        # S = I + 0.01 N(0, I), as the authors' code draws it (A.1's would be std 0.1)
        self.inv_cov_sqrt = nn.Parameter(torch.eye(2) + 0.01 * torch.randn(heads, 2, 2))

    @property
    def inv_cov(self) -> torch.Tensor:  # Sigma^-1, positive semi-definite by construction
        return self.inv_cov_sqrt @ self.inv_cov_sqrt.transpose(-1, -2)

    def logits(self, delta):
        d = delta[None] - self.centers.view(-1, *[1] * (delta.dim() - 1), 2)  # [heads, ..., 2]
        inv_cov = self.inv_cov.view(-1, *[1] * (delta.dim() - 1), 2, 2)
        return -0.5 * torch.einsum("h...i,h...ij,h...j->h...", d, inv_cov, d)


class RowColumn(nn.Module):
    """Section 4.3: logit = v_row . r_row[delta_row] + v_col . r_col[delta_col].
    This is eq. 8's last term v^T r_delta, with r_delta a row entry and a column entry concatenated.
    Each axis has a table of its shifts -(n-1)..n-1: learned (`learned`) or fixed sinusoids
    (`sinusoidal`, a suggestion of the paper's reviewer). Each table is `dim` wide and each layer
    has its own, as in the authors' code (Table 1's 12.3M parameters). The paper writes
    floor(D_p / 2) for each (section 4.3) and shares r_delta across layers (after eq. 8)."""

    separable = True
    undecayed = ()  # tables and head keys are weight-decayed like any weight (the authors' code)

    def __init__(self, heads: int, grid: tuple, dim: int, learned: bool = True):
        super().__init__()
        self.grid = tuple(grid)
        if learned:
            self.r_row = nn.Parameter(torch.randn(2 * grid[0] - 1, dim))
            self.r_col = nn.Parameter(torch.randn(2 * grid[1] - 1, dim))
        else:
            self.register_buffer("r_row", self.sinusoids(grid[0], dim), persistent=False)
            self.register_buffer("r_col", self.sinusoids(grid[1], dim), persistent=False)
        bound = 1 / math.sqrt(dim)  # as a bias-free nn.Linear(dim, heads) initializes its weight
        self.v_row = nn.Parameter(torch.empty(heads, dim).uniform_(-bound, bound))  # each head's v: its row half
        self.v_col = nn.Parameter(torch.empty(heads, dim).uniform_(-bound, bound))  # and its column half

    @staticmethod
    def sinusoids(n: int, dim: int) -> torch.Tensor:
        """Transformer sinusoids (Vaswani et al.) of one axis's shifts -(n-1)..n-1: [2n-1, dim], float32.

        Row i is the shift s = i - (n - 1). Its first ceil(dim / 2) columns hold sin(s omega_j), the
        next ones cos(s omega_j), for j = 0, 1, ..., ceil(dim / 2) - 1 and omega_j = 10000^(-2j / dim).
        The row is then cut to dim columns. Vaswani et al. interleave sines and cosines; we do not."""
        shift = torch.arange(-(n - 1), n).float()[:, None]
        freq = 10000 ** (-torch.arange(0, dim, 2).float() / dim)
        angle = shift * freq  # [2n-1, ceil(dim/2)]
        return torch.cat([angle.sin(), angle.cos()], dim=1)[:, :dim]

    def axis_logits(self, delta: torch.Tensor, axis: int) -> torch.Tensor:
        """One axis's term of section 4.3's logit: delta [...] -> [heads, ...], in the tables' dtype.

        delta holds shifts key - query along `axis` (0: rows, 1: columns), whole numbers in any dtype.
        Head h's term at shift s is v_h . r[s], with (r, v) = (r_row, v_row) for the rows and
        (r_col, v_col) for the columns. The table r [2n - 1, dim] holds shift s in its row s + n - 1,
        with n = self.grid[axis]. `logits` adds the two axes' terms; the fast layer's softmax takes
        each axis's term on its own (FastSelfAttention2d.axis_probs)."""
        table = (self.r_row, self.r_col)[axis] @ (self.v_row, self.v_col)[axis].T  # [2n-1, heads]
        index = delta.long() + self.grid[axis] - 1
        return table[index].movedim(-1, 0)

    def logits(self, delta):
        return self.axis_logits(delta[..., 0], 0) + self.axis_logits(delta[..., 1], 1)


def make_encoding(name: str, heads: int, grid: tuple, dim: int, center_std: float = 2.0,
                  min_alpha: float = 0.0) -> nn.Module:
    """An encoding by name. Centers (quadratic, gaussian) start at N(0, center_std^2 I).
    The authors' code has center_std 2; the paper's N(0, 2I) is center_std 1.41."""
    if name not in ENCODINGS:
        raise ValueError(f"unknown encoding {name!r}; choose one of {', '.join(ENCODINGS)}")
    if min_alpha and name != "quadratic":
        raise ValueError(f"min_alpha is a floor of the quadratic encoding's alpha; {name} has no alpha")
    if name in ("learned", "sinusoidal"):
        return RowColumn(heads, grid, dim, learned=name == "learned")
    if name == "mlp":  # ours (below the line)
        return ShiftMLP(heads)
    if name == "gaussian":
        return Gaussian(heads, center_std)
    return Quadratic(heads, center_std, min_alpha)


class SelfAttention2d(nn.Module):
    """Multi-head self-attention over an H x W grid (eqs. 1, 4, 6, 8, 11, 12), as the paper writes it.

    x [B, H, W, dim] -> [B, H, W, out_dim]. Each head averages the whole input with its
    probabilities: W_val^(h) = I, so D_h = dim. The network also has D_out = dim (section 4.3 (ii)).
    `W_out = Linear(heads * dim, out_dim)` projects the concatenated heads. Its h-th block,
    eq. 11's W^(h) = W_val^(h) W_out[h], can be any dim x out_dim matrix: what Lemma 1's D_h >= D_out is for.
    The logits depend on position only, unless `content=True` adds eq. 8's first term, the data
    term x_q W_qry W_key^T x_k / sqrt(D_k) (as in Vaswani et al.). Eq. 8's mixed terms are not used.
    `dropout` acts on the probabilities, as in the authors' code.
    """

    def __init__(self, dim: int, heads: int = 9, grid: tuple = (16, 16), encoding: str = "quadratic",
                 content: bool = False, dropout: float = 0.0, out_dim: int = None, center_std: float = 2.0,
                 min_alpha: float = 0.0):
        super().__init__()
        for name, value in (("dim", dim), ("heads", heads), ("out_dim", out_dim or dim)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        self.dim, self.heads, self.content = dim, heads, content
        self.grid = check_grid(grid)
        self.encoding = make_encoding(encoding, heads, self.grid, dim, center_std, min_alpha)
        self.encoding_name = encoding
        if content:  # eq. 8, first term: x_q W_qry W_key^T x_k / sqrt(D_k)
            self.key_dim = max(dim // heads, 1)
            self.W_qry = nn.Linear(dim, heads * self.key_dim, bias=False)
            self.W_key = nn.Linear(dim, heads * self.key_dim, bias=False)
        self.dropout = nn.Dropout(dropout)  # on the probabilities P (the authors' code)
        self.W_out = nn.Linear(heads * dim, out_dim or dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Eq. 4: MHSA(X) = concat_h [P_h X W_val^(h)] W_out + b_out, each W_val^(h) folded into
        its block of W_out (eq. 11's W^(h)). Per output pixel, this is eq. 12.

        x [B, H, W, dim] -> [B, H, W, out_dim]. P comes from `attention_probs`, then `self.dropout`:
        position-only P is the same for every image, so one dropout mask serves the batch (the
        authors' code). The concatenation puts head h's dim columns h-th, as W_out's blocks expect."""
        B, H, W, D = check_input(self, x).shape
        P = self.dropout(self.attention_probs(x))  # [heads, T, T], or [B, heads, T, T] with content
        P = P.expand(B, *P.shape[-3:])  # [B, heads, T, T], a view
        heads_out = torch.einsum("bhqk,bkd->bqhd", P, x.reshape(B, H * W, D))  # [B, T, heads, D]: P_h X
        return self.W_out(heads_out.reshape(B, H, W, -1))  # concat_h, then W_out (the W^(h) of eq. 11): [B, H, W, out_dim]

    def attention_probs(self, x: torch.Tensor = None) -> torch.Tensor:
        """P = softmax over keys of the logits (eq. 1, footnote 3): [heads, T, T].
        With content=True it is [B, heads, T, T] and needs the input x [B, H, W, dim]."""
        logits = self.position_logits()  # [heads, T, T]
        if self.content:
            if x is None:
                raise ValueError("content=True: attention_probs needs the input x")
            logits = logits + self.content_logits(check_input(self, x).flatten(1, 2))  # [B, heads, T, T]
        return logits.softmax(-1)  # each query's row sums to 1

    def position_logits(self) -> torch.Tensor:
        """Eqs. 9, 15, 16 or section 4.3 at every (query, key) pair's shift: [heads, T, T]."""
        H, W = self.grid
        return self.encoding.logits(pairwise_shifts(H, W).to(self.W_out.weight))  # [T, T, 2] -> [heads, T, T]

    def content_logits(self, x: torch.Tensor) -> torch.Tensor:
        """Eq. 8, first term. x [B, T, dim] -> [B, heads, T, T]."""
        B, T, _ = x.shape
        q = self.W_qry(x).view(B, T, self.heads, self.key_dim).transpose(1, 2)  # [B, heads, T, D_k]
        k = self.W_key(x).view(B, T, self.heads, self.key_dim).transpose(1, 2)  # [B, heads, T, D_k]
        return q @ k.transpose(-1, -2) / math.sqrt(self.key_dim)  # [B, heads, T, T]


# ---- the same layer in fewer operations (skip on first reading) ------------------------------
# The network uses this class; test_all.py holds it to SelfAttention2d in values and gradients.

class FastSelfAttention2d(SelfAttention2d):
    """SelfAttention2d computed in fewer operations: the same constructor, parameters and
    state_dict (a checkpoint loads into either), equal in values and gradients (test_all.py).

    Position-only probabilities are the same for every image: computed once per forward from
    the (2H-1) x (2W-1) table of distinct shifts. When the logits are a row term plus a
    column term (quadratic, learned, sinusoidal) the softmax over the full grid factorizes,
    P_h = P_h^row (x) P_h^col, so each head is an H x H and a W x W product instead of a
    T x T one. Content layers (eq. 8) are computed as the paper's layer computes them.
    """

    @property
    def factorized(self) -> bool:
        """Row x column factorization applies: separable logits, no content, no dropout on P."""
        return self.encoding.separable and not self.content and not (self.training and self.dropout.p > 0)

    def forward(self, x):  # eq. 12 for position-only heads: [B, H, W, D] -> [B, H, W, out_dim]
        if self.content:
            return super().forward(x)
        B, H, W, D = check_input(self, x).shape
        device = x.device.type  # (autocast exists on cpu, cuda, mps; not on meta, where tests check devices)
        autocast = torch.amp.is_autocast_available(device) and torch.is_autocast_enabled(device)
        if autocast:  # cast x once, not once per head
            x = x.to(torch.get_autocast_dtype(device))
        if not self.factorized:  # every head's T x T probabilities, all heads in one product
            P = self.dropout(self.attention_probs())  # [heads, T, T], one dropout mask for the batch
            if autocast:  # cast P once per layer: cast inside a product, each head's P was copied per image
                P = P.to(x.dtype)
            T = H * W
            y = P @ x.reshape(B, T, D).transpose(0, 1).reshape(T, B * D)  # [heads, T, B * D]: P_h X, every image
            y = y.view(self.heads, T, B, D).permute(2, 1, 0, 3)  # [B, T, heads, D]: eq. 12's concatenation
            return self.W_out(y.reshape(B, H, W, -1))
        # Factorized, heads are mixed one at a time (one product over all heads was 1.8x slower in
        # fp32 on a 2-core CPU: its inner dimension, 16, is too small for the matrix kernels), then
        # concatenated and projected by one W_out product, as in eq. 12.
        p_row, p_col = self.axis_probs()
        x_rows = x.reshape(B, H, W * D)
        mixed = [self._mix(x_rows, p_row[h], p_col[h]) for h in range(self.heads)]  # [B * H, W, D] each
        y = torch.stack(mixed, dim=-2)  # [B * H, W, heads, D]: eq. 12's concatenation
        return self.W_out(y.view(B, H, W, -1))

    def attention_probs(self, x: torch.Tensor = None) -> torch.Tensor:
        if self.content:
            return super().attention_probs(x)
        if self.encoding.separable:  # P_h = P_h^row (x) P_h^col: [heads, T, T]
            p_row, p_col = self.axis_probs()
            T = p_row.shape[1] * p_col.shape[1]
            return (p_row[:, :, None, :, None] * p_col[:, None, :, None, :]).reshape(-1, T, T)
        return self.position_logits().softmax(-1)

    def position_logits(self):  # [heads, T, T], gathered from the encoding of each distinct shift
        H, W = self.grid
        weight = self.W_out.weight  # for the device and dtype
        table = self.encoding.logits(shift_table(H, W).to(weight))  # [heads, 2H-1, 2W-1]
        r, c = torch.arange(H, device=weight.device), torch.arange(W, device=weight.device)
        rows = (r[None, :] - r[:, None] + H - 1)[:, None, :, None]  # row of key - query in table
        cols = (c[None, :] - c[:, None] + W - 1)[None, :, None, :]
        index = (rows * (2 * W - 1) + cols).reshape(H * W, H * W)  # [T, T]
        return table.flatten(1)[:, index]

    def axis_probs(self):  # P^row [heads, H, H], P^col [heads, W, W]
        weight = self.W_out.weight
        rows, cols = (torch.arange(n, device=weight.device, dtype=weight.dtype) for n in self.grid)
        p_row = self.encoding.axis_logits(rows[None, :] - rows[:, None], 0).softmax(-1)
        p_col = self.encoding.axis_logits(cols[None, :] - cols[:, None], 1).softmax(-1)
        return p_row, p_col

    @staticmethod
    def _mix(x_rows, p_row, p_col):  # [B, H, W * D] -> [B * H, W, D], one head
        # Each head's row-mixed intermediate is saved for backward: more memory than the dense
        # path (lab/bench.py measures both) for 5-10% less time than recomputing it.
        B, H, _ = x_rows.shape
        W = p_col.shape[0]
        y = torch.bmm(p_row.expand(B, H, H), x_rows).view(B * H, W, -1)  # mix along rows
        return torch.bmm(p_col.expand(B * H, W, W), y)  # then along columns


# ---- ours, beyond the paper, and the checks of the layer's arguments -------------------------

class ShiftMLP(nn.Module):
    """Beyond the paper (a question of its reviewer): logits are a learned smooth function of the
    shift, one small MLP per layer shared by its heads, instead of a lookup table. The shift
    enters in pixels, the unit of the quadratic's distance and of the tables' index: scaled
    to [-1, 1] on a 16 x 16 grid, a one-pixel head needs 15x larger first-layer weights, and
    fitting one took 12-20x more SGD steps (lab/RESULTS.md)."""

    separable = False
    undecayed = ()

    def __init__(self, heads: int, hidden: int = 64):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(2, hidden), nn.GELU(), nn.Linear(hidden, hidden),
                                 nn.GELU(), nn.Linear(hidden, heads))

    def logits(self, delta):  # delta [..., 2] in pixels -> [heads, ...]
        return self.net(delta).movedim(-1, 0)


def check_grid(grid) -> tuple:
    if (not isinstance(grid, (tuple, list)) or len(grid) != 2
            or not all(isinstance(n, int) and n >= 1 for n in grid)):
        raise ValueError(f"grid must be two positive integers (H, W), got {grid!r}")
    return tuple(grid)


def check_input(layer: SelfAttention2d, x: torch.Tensor) -> torch.Tensor:
    if x.dim() != 4 or tuple(x.shape[1:3]) != layer.grid or x.shape[3] != layer.dim:
        raise ValueError(f"expected input [B, {layer.grid[0]}, {layer.grid[1]}, {layer.dim}], "
                         f"got {list(x.shape)}")
    return x


def set_grid(layer: SelfAttention2d, grid: tuple):
    """Move a layer to another grid size: possible when no parameter depends on it (prove.py's
    construction pads its input)."""
    grid = check_grid(grid)
    if layer.encoding_name in ("learned", "sinusoidal") and grid != layer.grid:
        raise ValueError(f"{layer.encoding_name} tables are sized for grid {layer.grid}, not {grid}")
    layer.grid = grid


def main():
    torch.manual_seed(0)
    x = torch.randn(2, 8, 6, 32)
    for name in ENCODINGS:
        layer = SelfAttention2d(32, heads=4, grid=(8, 6), encoding=name)
        fast = FastSelfAttention2d(32, heads=4, grid=(8, 6), encoding=name)
        fast.load_state_dict(layer.state_dict())
        err = (layer(x) - fast(x)).abs().max().item()
        params = sum(p.numel() for p in layer.encoding.parameters())
        print(f"{name:>10}: out {list(layer(x).shape)}, positional parameters {params:>5}, "
              f"max |paper's layer - fast| = {err:.1e}")


if __name__ == "__main__":
    command_line(main, ())  # the process set up as every script's (runtime.py)
