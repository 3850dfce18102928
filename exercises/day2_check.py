"""Day 2's items: section 4.1's network, written where it lives, held to references written out here.

    python -m exercises.check 2

The functions: model.space_to_depth, model.Block.forward, model.SelfAttentionNet.forward and
model.paper_flops. The references: a 4 x 4 image of 0..15 by hand, space-to-depth as loops over
pixels, the block and the network in float64 from their own weights (F.linear, F.layer_norm,
F.gelu, eq. 16's softmax and eq. 12's sum), the FLOPs in closed form from section 4.1's shapes and
ResNet18's, and the paper's Tables 1-2 to their rounding. Seeded inputs: every CPU gives the same
verdicts.
"""
import functools
import math

import torch
import torch.nn.functional as F

import model
from attention import SelfAttention2d
from exercises.check import Item

WRITE = {"model.py": ("space_to_depth", "Block.forward", "SelfAttentionNet.forward", "paper_flops")}
STRETCH = {}

# Section 4.1's network: 6 layers of 9 heads, width 400, FFN 512, 10 classes, 32 x 32 images.
LAYERS, HEADS, DIM, FFN, CLASSES, SIDE = 6, 9, 400, 512, 10, 32
# A tiny network for the float64 items: 2 layers of 4 heads, width 8, FFN 12, 5 classes, 8 x 8 images.
TINY = dict(layers=2, heads=4, dim=8, ffn_dim=12, num_classes=5, image_size=8)


def randn(*shape, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def max_error(yours: torch.Tensor, reference: torch.Tensor) -> float:
    """max |yours - reference|; inf when the shapes differ (nothing is broadcast)."""
    if tuple(yours.shape) != tuple(reference.shape):
        return math.inf
    return (yours.double() - reference.double()).abs().max().item()


def randomized(module: torch.nn.Module, seed: int) -> torch.nn.Module:
    """float64, every parameter moved off its initialization (LayerNorm's 1 and 0 would hide a swap)."""
    module = module.double()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(0.5 * torch.randn(p.shape, generator=g, dtype=torch.float64))
    return module


# ---- space-to-depth ---------------------------------------------------------------------------

def space_to_depth_loops(x: torch.Tensor, b: int) -> torch.Tensor:
    """[B, C, H, W] -> [B, H/b, W/b, b*b*C], pixel by pixel: channel (di * b + dj) * C + c of token
    (i, j) is color c of pixel (b*i + di, b*j + dj)."""
    B, C, H, W = x.shape
    out = torch.zeros(B, H // b, W // b, b * b * C, dtype=x.dtype)
    for i in range(H // b):
        for j in range(W // b):
            for di in range(b):
                for dj in range(b):
                    for c in range(C):
                        out[:, i, j, (di * b + dj) * C + c] = x[:, c, b * i + di, b * j + dj]
    return out


def hand_case_error() -> float:
    """A 4 x 4 one-color image of 0..15: each token lists its 2 x 2 block's pixels row-major."""
    image = torch.arange(16.0, dtype=torch.float64).view(1, 1, 4, 4)
    expected = torch.tensor([[[[0, 1, 4, 5], [2, 3, 6, 7]],
                              [[8, 9, 12, 13], [10, 11, 14, 15]]]], dtype=torch.float64)  # [1, 2, 2, 4]
    return max_error(model.space_to_depth(image), expected)


def space_to_depth_error(shape: tuple, block: int):
    def measure() -> float:
        x = randn(*shape, seed=0)
        return max_error(model.space_to_depth(x, block), space_to_depth_loops(x, block))
    return measure


# ---- the block and the network, written out ---------------------------------------------------

def attention_reference(layer: SelfAttention2d, x: torch.Tensor) -> torch.Tensor:
    """Eq. 12 for a position-only Gaussian layer, written out: x [B, H, W, D] -> [B, H, W, out]."""
    B, H, W, D = x.shape
    heads = layer.heads
    pos = torch.cartesian_prod(torch.arange(H), torch.arange(W)).double()  # [T, 2] row-major
    d = pos[None, :, None] - pos[:, None, None] - layer.encoding.centers  # [T, T, heads, 2]: k - q - Delta
    S = layer.encoding.inv_cov_sqrt
    inv_cov = S @ S.transpose(-1, -2)  # [heads, 2, 2]: Sigma^-1 = S S^T
    P = (-0.5 * torch.einsum("qkhi,hij,qkhj->hqk", d, inv_cov, d)).softmax(-1)  # eq. 16: [heads, T, T]
    X = x.reshape(B, H * W, D)
    Wo = layer.W_out.weight.view(-1, heads, D)  # [out, heads, D]: head h's block is Wo[:, h]
    out = sum(P[h] @ X @ Wo[:, h].T for h in range(heads)) + layer.W_out.bias  # [B, T, out]
    return out.view(B, H, W, -1)


def block_reference(block: model.Block, x: torch.Tensor) -> torch.Tensor:
    """The post-LN block of section 4.1 in eval mode (no dropout), from the block's own weights."""
    dim = x.shape[-1]

    def norm(v, ln):
        return F.layer_norm(v, (dim,), ln.weight, ln.bias, eps=ln.eps)
    attended = F.linear(attention_reference(block.attention, x), block.attention_out.weight, block.attention_out.bias)
    x = norm(x + attended, block.norm1)
    up, down = block.ffn[0], block.ffn[2]
    hidden = F.gelu(F.linear(x, up.weight, up.bias))  # erf GELU, as nn.GELU()
    return norm(x + F.linear(hidden, down.weight, down.bias), block.norm2)


def a_block(dropout: float, seed: int) -> model.Block:
    """A block on a 4 x 6 grid (rows != columns): 4 Gaussian heads, width 8, FFN 12."""
    torch.manual_seed(seed)
    return randomized(model.Block(SelfAttention2d(8, 4, (4, 6), "gaussian"), 8, 12, dropout), seed)


def block_error() -> float:
    block = a_block(0.1, seed=1).eval()
    x = randn(2, 4, 6, 8, seed=2)
    with torch.no_grad():
        return max_error(block(x), block_reference(block, x))


def dropped_block_error() -> float:
    """Train mode with dropout 1: both residual branches are dropped, so the block is norm2(norm1(x))."""
    block = a_block(1.0, seed=3).train()
    x = randn(2, 4, 6, 8, seed=4)
    with torch.no_grad():
        expected = F.layer_norm(F.layer_norm(x, (8,), block.norm1.weight, block.norm1.bias, eps=1e-12),
                                (8,), block.norm2.weight, block.norm2.bias, eps=1e-12)
        return max_error(block(x), expected)


def network_error() -> float:
    """The tiny Gaussian network on 3 images of 8 x 8 against section 4.1 written out, float64."""
    torch.manual_seed(5)
    net = randomized(model.build_model("gaussian", **TINY), seed=5).eval()
    images = randn(3, 3, 8, 8, seed=6)
    with torch.no_grad():
        x = F.linear(space_to_depth_loops(images, 2), net.embed.weight, net.embed.bias)  # [3, 4, 4, 8]
        for block in net.blocks:
            x = block_reference(block, x)
        reference = F.linear(x.mean(dim=(1, 2)), net.classifier.weight, net.classifier.bias)  # [3, 5]
        return max_error(net(images), reference)


# ---- FLOPs in closed form ---------------------------------------------------------------------

def attention_net_flops(heads: list, dim: int, ffn_dim: int, classes: int, side: int) -> int:
    """2 x multiply-adds of section 4.1's Linear layers. Every token passes Linear(12, dim), and in
    each layer W_out (heads * dim -> dim), Linear(dim, dim) and the FFN; the classifier acts once."""
    tokens = (side // 2) ** 2
    per_token = 12 * dim + sum(h * dim * dim + dim * dim + 2 * dim * ffn_dim for h in heads)
    return 2 * (tokens * per_token + dim * classes)


def resnet18_flops(width: int, side: int, classes: int = 10) -> int:
    """2 x multiply-adds of the CIFAR ResNet18's convolutions and classifier: a conv costs
    (output pixels) x C_out x C_in x k x k; a 3 x 3 conv of stride s, padding 1 keeps ceil(n / s)."""
    n = side
    macs = n * n * width * 3 * 9  # the stem, 3 -> width
    c_in = width
    for c_out, stride in ((width, 1), (2 * width, 2), (4 * width, 2), (8 * width, 2)):
        m = -(-n // stride)
        macs += m * m * c_out * c_in * 9 + m * m * c_out * c_out * 9  # first block: conv1, conv2
        if stride != 1 or c_in != c_out:
            macs += m * m * c_out * c_in  # its 1 x 1 shortcut
        macs += 2 * m * m * c_out * c_out * 9  # second block
        n, c_in = m, c_out
    return 2 * (macs + 8 * width * classes)


@functools.cache
def flops_of(name: str) -> int:
    """model.paper_flops of one of the networks the items count (built once)."""
    torch.manual_seed(0)
    if name == "tiny":  # heads differ by layer, 12 x 12 images: 36 tokens
        net = model.build_model("gaussian", layers=2, heads=[3, 2], dim=8, ffn_dim=12, num_classes=5, image_size=12)
        return model.paper_flops(net, 12)
    if name == "small resnet":
        return model.paper_flops(model.ResNet18(num_classes=10, width=8), 16)
    overrides = dict(heads=model.PRUNED_HEADS) if name == "pruned" else {}
    return model.paper_flops(model.build_model("gaussian" if name == "pruned" else name, **overrides))


def items(run: str) -> list:
    hint_flops = ("2 x multiply-adds of every nn.Linear and nn.Conv2d as the forward pass runs them: a Linear "
                  "acts on every token it is given (Linear(n_in, n_out) on n vectors is n * n_in * n_out), a "
                  "Conv2d costs C_in * kh * kw per output number; the classifier acts once, on the mean token; "
                  "biases and P_h X are not counted")
    hint_block = ("post-LN: x = norm1(x + dropout(attention_out(attention(x)))), then norm2(x + dropout(ffn(x))); "
                  "each LayerNorm comes after its add")
    pruned = attention_net_flops(model.PRUNED_HEADS, DIM, FFN, CLASSES, SIDE)
    checks = [
        Item("model.space_to_depth of a 4x4 image of 0..15 = [[[0,1,4,5],[2,3,6,7]],[[8,9,12,13],[10,11,14,15]]]",
             hand_case_error, 0.0, 0.0,
             "token (i, j) holds pixels (2i, 2j), (2i, 2j+1), (2i+1, 2j), (2i+1, 2j+1) in that order: "
             "the first token is 0, 1, 4, 5, not 0, 4, 1, 5 (the block read column by column) nor 0, 1, 2, 3 "
             "(a plain reshape); inf: the output's shape is wrong"),
        Item("model.space_to_depth on [2, 3, 6, 10] (H != W), block 2 = pixel-by-pixel loops",
             space_to_depth_error((2, 3, 6, 10), 2), 0.0, 0.0,
             "out [B, H/2, W/2, 4C], channels last; channel (2 * di + dj) * 3 + c: the block's pixel outer, the "
             "color inner; rows (H) before columns (W) in every view and permute: a square image hides a swap"),
        Item("model.space_to_depth on [2, 3, 6, 12], block 3 = pixel-by-pixel loops",
             space_to_depth_error((2, 3, 6, 12), 3), 0.0, 0.0,
             "use `block` everywhere, not 2: out [B, H/3, W/3, 9C], channel (3 * di + dj) * C + c"),
        Item("model.Block.forward, eval mode, 4 x 6 grid = the post-LN block written out (float64)",
             block_error, 0.0, 1e-12, hint_block + "; inf: the output's shape is wrong"),
        Item("model.Block.forward, train mode with dropout 1 = norm2(norm1(x)) (both branches dropped)",
             dropped_block_error, 0.0, 1e-12,
             "self.dropout acts on each branch before its add: on attention_out's output and on the FFN's, "
             "never on the sum"),
        Item("model.SelfAttentionNet.forward, 2 layers, 3 images of 8 x 8 = section 4.1 written out (float64)",
             network_error, 0.0, 1e-12,
             "space_to_depth of the images as they are, then embed, every block in order, the mean over the "
             "positions (dims 1 and 2 of [B, H/2, W/2, dim]), the classifier; inf: the output is not "
             "[B, num_classes]"),
    ]
    for name, reference, what in (
            ("tiny", attention_net_flops([3, 2], 8, 12, 5, 12), "2 layers of 3 and 2 heads, width 8, 12 x 12 images"),
            ("quadratic", attention_net_flops([HEADS] * LAYERS, DIM, FFN, CLASSES, SIDE), "section 4.1's network"),
            ("pruned", pruned, f"Table 2's pruned network, heads {model.PRUNED_HEADS}"),
            ("small resnet", resnet18_flops(8, 16), "ResNet18 of width 8 on 16 x 16 images"),
            ("resnet18", resnet18_flops(64, SIDE), "ResNet18 on 32 x 32 images")):
        checks.append(Item(f"model.paper_flops: {what}, minus the closed form ({reference:,})",
                           lambda n=name, r=reference: flops_of(n) - r, 0, 0, hint_flops))
    for name, row in (("quadratic", "Table 1's SA quadratic"), ("resnet18", "Tables 1-2's ResNet18"),
                      ("pruned", "Table 2's pruned model")):
        paper = model.PAPER[name][1] / 1e9
        checks.append(Item(f"model.paper_flops in billions = {row}, {paper}B, to its rounding",
                           lambda n=name: flops_of(n) / 1e9, paper, 0.05, hint_flops))
    return checks
