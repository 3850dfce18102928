"""The 6-layer attention-only network of section 4.1 and the ResNet18 baseline.

    python model.py        # parameters and FLOPs of each model against the paper's Tables 1-2, and of a training step

It runs in seconds on a CPU. Parameters: quadratic 12,086,844 (paper 12.1M), learned 12,278,682
(12.3M), ResNet18 11,173,962 (11.2M), Table 2's pruned model 9,686,916 (9.7M). FLOPs per image:
6.18B for the paper's encodings (6.2B), 1.11B for ResNet18 (1.1B), 4.95B pruned (4.9B). We count
2 x the multiply-adds of Linear and Conv2d layers. The paper does not say how it counts; ours matches it.

SelfAttentionNet has the authors' code's shapes, so its parameter counts match the paper's.
Image [B, 3, 32, 32] -> 2x2 space-to-depth [B, 16, 16, 12] -> Linear(12, 400) -> 6 post-LN blocks
-> mean over the 16 x 16 positions -> Linear(400, 10). A block is attention, Linear(400, 400),
dropout, add & LayerNorm, then an FFN 400 -> 512 -> 400 with GELU, dropout, add & LayerNorm.
"""
import inspect
import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from attention import ENCODINGS, FastSelfAttention2d, SelfAttention2d, kernel_shifts
from runtime import command_line

MODELS = ENCODINGS + ("resnet18",)
CENTERED = ("quadratic", "gaussian")  # the encodings whose heads have centers
# Paper, Tables 1-2: parameters and FLOPs (2 x multiply-adds of Linear/Conv layers).
PAPER = {"quadratic": (12.1e6, 6.2e9), "gaussian": (12.1e6, 6.2e9), "learned": (12.3e6, 6.2e9),
         "resnet18": (11.2e6, 1.1e9), "pruned": (9.7e6, 4.9e9)}
# Table 2's pruned model: the Gaussian one with A.1's [2, 4, 1, 2, 6, 0] heads pruned from its 6 layers.
PRUNED_HEADS = [9 - n for n in (2, 4, 1, 2, 6, 0)]


def space_to_depth(x: torch.Tensor, block: int = 2) -> torch.Tensor:
    """Invertible downsampling (Jacobsen et al., 2018): x [B, C, H, W] -> [B, H/b, W/b, b*b*C], b = block.
    H and W are multiples of b, square or not. Token (i, j)'s channel (di * b + dj) * C + c is color c of
    pixel (b*i + di, b*j + dj): its b x b block's pixels row-major, the colors inner. No parameters."""
    B, C, H, W = x.shape
    x = x.view(B, C, H // block, block, W // block, block)
    return x.permute(0, 2, 4, 3, 5, 1).reshape(B, H // block, W // block, block * block * C)


class Block(nn.Module):
    """A post-LN transformer block whose attention is SelfAttention2d (BERT layout, eps 1e-12)."""

    def __init__(self, attention: SelfAttention2d, dim, ffn_dim, dropout, eps=1e-12):
        super().__init__()
        self.attention = attention
        self.attention_out = nn.Linear(dim, dim)  # BERT's output projection after W_out (the authors' code; Table 1's count)
        self.norm1 = nn.LayerNorm(dim, eps=eps)
        self.ffn = nn.Sequential(nn.Linear(dim, ffn_dim), nn.GELU(), nn.Linear(ffn_dim, dim))
        self.norm2 = nn.LayerNorm(dim, eps=eps)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        """x [B, H, W, dim] -> [B, H, W, dim], post-LN (BERT): x + dropout(attention_out(attention(x))),
        then norm1; then x + dropout(ffn(x)), then norm2."""
        x = self.norm1(x + self.dropout(self.attention_out(self.attention(x))))  # [B, H, W, dim]
        return self.norm2(x + self.dropout(self.ffn(x)))  # [B, H, W, dim]


class SelfAttentionNet(nn.Module):
    """Section 4.1. `heads` is one number for every layer, or one per layer (a pruned model)."""

    def __init__(self, encoding: str = "quadratic", layers: int = 6, heads=9, dim: int = 400,
                 ffn_dim: int = 512, dropout: float = 0.1, attention_dropout: float = 0.1,
                 content: bool = False, image_size: int = 32, num_classes: int = 10, center_std: float = 2.0,
                 grid_start: bool = False, min_alpha: float = 0.0, layer: type = SelfAttention2d):
        super().__init__()
        heads = [heads] * layers if isinstance(heads, int) else list(heads)
        if len(heads) != layers:
            raise ValueError(f"heads lists {len(heads)} layers, the model has {layers}")
        if image_size % 2:
            raise ValueError(f"image_size must be even for 2x2 space-to-depth, got {image_size}")
        if grid_start and encoding not in CENTERED:
            raise ValueError(f"grid_start moves head centers; {encoding} heads have none")
        grid = (image_size // 2, image_size // 2)
        self.embed = nn.Linear(12, dim)  # 2 x 2 x RGB pixels per token
        # `layer`: the paper's SelfAttention2d (eq. 12 as written), or FastSelfAttention2d, which
        # train.py runs: the same layer in fewer operations, held equal to it by the tests.
        self.blocks = nn.ModuleList(Block(layer(dim, n, grid, encoding, content, attention_dropout, center_std=center_std,
                                                min_alpha=min_alpha), dim, ffn_dim, dropout) for n in heads)
        self.classifier = nn.Linear(dim, num_classes)
        if grid_start:  # ConViT's local init: head h starts at the h-th shift of a K x K kernel, plus its draw
            for attention in self.attention_layers:
                if hasattr(attention.encoding, "centers") and math.isqrt(attention.heads) ** 2 == attention.heads:
                    with torch.no_grad():  # (a pruned layer keeps its draw: its weights come from a checkpoint)
                        attention.encoding.centers += kernel_shifts(attention.heads)

    def forward(self, images):
        """images [B, 3, H, W] -> logits [B, num_classes], section 4.1: 2x2 space_to_depth, embed, the
        blocks in turn, the mean over the H/2 x W/2 positions, then the classifier."""
        x = self.embed(space_to_depth(images))  # [B, H/2, W/2, dim]
        for block in self.blocks:
            x = block(x)  # [B, H/2, W/2, dim]
        return self.classifier(x.mean(dim=(1, 2)))  # mean over the positions: [B, dim] -> [B, classes]

    @property
    def attention_layers(self):
        return [block.attention for block in self.blocks]


class BasicBlock(nn.Module):
    def __init__(self, c_in, c_out, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.shortcut = nn.Sequential()
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(y)) + self.shortcut(x))


class ResNet18(nn.Module):
    """He et al. (2015), CIFAR variant: 3x3 stem, no max-pool, stages of 64-128-256-512 channels.
    `width` is the first stage's 64; smaller widths make quick CPU baselines."""

    def __init__(self, num_classes: int = 10, width: int = 64):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        stages, c_in = [], width
        for c_out, stride in ((width, 1), (2 * width, 2), (4 * width, 2), (8 * width, 2)):
            stages += [BasicBlock(c_in, c_out, stride), BasicBlock(c_out, c_out, 1)]
            c_in = c_out
        self.stages = nn.Sequential(*stages)
        self.classifier = nn.Linear(8 * width, num_classes)

    def forward(self, images):
        return self.classifier(self.stages(self.stem(images)).mean(dim=(2, 3)))


def build_model(name: str, **overrides) -> nn.Module:
    """`resnet18`, or a SelfAttentionNet with that encoding; overrides go to the constructor."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; choose one of {', '.join(MODELS)}")
    model = ResNet18 if name == "resnet18" else SelfAttentionNet
    allowed = set(inspect.signature(model).parameters) - {"encoding"}
    if overrides.keys() - allowed:
        raise ValueError(f"{name} takes no {', '.join(sorted(overrides.keys() - allowed))}; "
                         f"it takes {', '.join(sorted(allowed))}")
    return ResNet18(**overrides) if name == "resnet18" else SelfAttentionNet(encoding=name, **overrides)


# ---- a model from a run's config (the dict train.py's Config stores) ------------------------

def model_kwargs(config: dict) -> dict:
    """The constructor arguments that a run's config gives build_model: the settings that shaped
    its model. A setting that the run's encoding does not use is left out, not refused. A run's
    config is its history: learned runs recorded `grid_start: true` before that flag was refused
    for them. It is read as the model the run built, not checked again as a new command."""
    if config["encoding"] == "resnet18":
        return dict(width=config["width"])
    names = ["layers", "heads", "dim", "ffn_dim", "dropout", "attention_dropout", "content"]
    if config["encoding"] in CENTERED:  # centers to draw and place
        names += ["center_std", "grid_start"]
    if config["encoding"] == "quadratic":  # an alpha to floor
        names.append("min_alpha")
    return {k: config[k] for k in names}


def model_from_config(config: dict, layer: type = SelfAttention2d) -> nn.Module:
    """The model a run's config describes, its attention layers of class `layer`."""
    kwargs = model_kwargs(config) | ({"layer": layer} if config["encoding"] != "resnet18" else {})
    return build_model(config["encoding"], **kwargs)


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def paper_flops(model: nn.Module, image_size: int = 32) -> int:
    """FLOPs per image of one forward pass in eval mode on an_image(model, image_size): 2 x the
    multiply-adds of the model's nn.Linear and nn.Conv2d layers, nothing else. An integer.

    A layer's multiply-adds are all those it performs in that pass, on every input it is
    applied to. A bias is an add without a multiply: not counted. Nor are the attention
    products P_h X, norms, activations and means. The paper does not define its count; this
    convention (ours) reproduces its Tables 1-2 (6.2B, 1.1B). The model's train/eval mode is
    left as it was."""
    macs = []

    def hook(m, inputs, out):
        macs.append(out.numel() * (m.in_features if isinstance(m, nn.Linear) else m.weight[0].numel()))

    handles = [m.register_forward_hook(hook) for m in model.modules() if isinstance(m, (nn.Linear, nn.Conv2d))]
    mode = model.training
    with torch.no_grad():
        model.eval()(an_image(model, image_size))
    model.train(mode)
    for h in handles:
        h.remove()
    return 2 * sum(macs)


def counted_flops(model: nn.Module, image_size: int = 32, training: bool = False) -> int:
    """Every matrix product per image (FlopCounterMode), attention included: of a forward pass
    in eval mode, or (`training`) of a training step as train.py runs it, forward and backward
    in train mode, so that attention dropout turns the fast layer's factorization off."""
    mode = model.training
    with FlopCounterMode(display=False) as counter:
        if training:
            model.train()(an_image(model, image_size)).sum().backward()
        else:
            with torch.no_grad():
                model.eval()(an_image(model, image_size))
    model.train(mode)
    if training:
        model.zero_grad(set_to_none=True)
    return counter.get_total_flops()


def an_image(model: nn.Module, image_size: int) -> torch.Tensor:
    """One blank image [1, 3, size, size] on the model's device, in its dtype."""
    weight = next(model.parameters())
    return torch.zeros(1, 3, image_size, image_size, device=weight.device, dtype=weight.dtype)


def main():
    print(f"{'model':<11}{'params':>12}{'paper':>8}{'FLOPs (paper count)':>21}{'paper':>7}"
          f"{'all FLOPs, dense':>18}{'fast':>8}{'train step':>12}")
    rows = [(name, name, {}) for name in MODELS] + [("pruned", "gaussian", dict(heads=PRUNED_HEADS))]
    for name, encoding, overrides in rows:
        torch.manual_seed(0)
        model = build_model(encoding, **overrides)
        paper_p, paper_f = (f"{v / s:.1f}{u}" for v, s, u in zip(PAPER.get(name, (0, 0)), (1e6, 1e9), "MB"))
        fast = build_model(encoding, layer=FastSelfAttention2d, **overrides) if name != "resnet18" else model
        print(f"{name:<11}{count_parameters(model):>12,}{paper_p if name in PAPER else '-':>8}"
              f"{paper_flops(model) / 1e9:>20.2f}B{paper_f if name in PAPER else '-':>7}"
              f"{counted_flops(model) / 1e9:>17.2f}B{counted_flops(fast) / 1e9:>7.2f}B"
              f"{counted_flops(fast, training=True) / 1e9:>11.2f}B")
    print("Counted (ours; it matches the paper's tables): 2 x multiply-adds of Linear/Conv layers only; the attention product "
          "P_h X (9 x 256 x 256 x 400 multiply-adds per layer) is not counted.\n'all FLOPs' "
          "counts every matrix product (torch.utils.flop_counter) per image of a forward pass for the paper's layer / the "
          "fast one; 'train step' those of a training step per image as train.py runs the paper's recipe (forward and backward, the "
          "authors' attention dropout 0.1, which turns the fast layer's factorization off).")


if __name__ == "__main__":
    command_line(main, ())  # the process set up as every script's (runtime.py): subnormals flushed first
