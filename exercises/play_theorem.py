"""Theorem 1 to play with: K^2 quadratic heads become a K x K convolution as alpha grows.

    python -m exercises.play_theorem        # a window with sliders (any desktop matplotlib backend);
                                            # without a display, the figure to runs/play_theorem.png

In a Jupyter notebook, with ipympl installed (`pip install ipympl`; not a dependency of this project):

    %matplotlib widget
    from exercises.play_theorem import build
    play = build()      # keep the returned object: the sliders answer only while it lives

Without a display, move the sliders by name ("alpha" holds log10 alpha; "K"; "head", the chosen
head; "row", "col", its center Delta) and save the figure:

    MPLBACKEND=Agg python -c "from exercises.play_theorem import build; p = build(); p.sliders['alpha'].set_val(0.7); p.save('runs/theorem1.png')"

The layer is prove.py's (section 3, Lemmas 1-2): `conv_to_attention` turns a random K x K
single-channel conv (no bias, float64) into K^2 heads of eq. 9, head h centred on the kernel
shift Delta^(h) with width alpha and value map W^(h) = the kernel's entry at that shift
(eq. 11). The photo (prove.photo, 32 x 32, gray) is padded with K//2 rings of zero tokens,
as the conv pads it.
- Top: for the central query q of the photo, all heads' P_h[q, q + delta] (one color each,
  mixed by their probabilities; the query is the white square, the chosen head's center the
  cross), the chosen head alone, the kernel the heads express, sum_h P_h[q, q + delta] W^(h)
  (eq. 12 at one query), and the conv's own kernel (gray outside its K x K shifts).
- Bottom: the photo, F.conv2d of it, the layer's output MHSA(X) with the largest
  |MHSA(X) - conv2d(X)| in its title, and log10 of that difference per pixel.
- Right: the largest difference against alpha for the centers as they are now; the dot is
  the current alpha. On the kernel shifts it falls like exp(-alpha) to float64 round-off.
Sliders: alpha (log scale, 0.1 to 50), K (3, 5, 7; a new conv and its K^2 heads), the chosen
head, and its center Delta (row, col of k - q, continuous; the red tick is its kernel shift);
"reset centers" puts every head back on its shift. Try: raise alpha; move one head half a
pixel off its shift, then a whole pixel onto another head's; lower alpha until the heads overlap.

The output is computed by FastSelfAttention2d loaded with the layer's weights (attention.py:
the network's layer, equal to the paper's in float64), which forms each head's probabilities
as a row times a column softmax, so a slider move costs milliseconds rather than the seconds
of the paper's T x T layer; the top panels use the paper's eq. 9 and softmax over every key.
"""
import re
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.nn.functional as F
from matplotlib import colormaps
from matplotlib.colors import hsv_to_rgb
from matplotlib.ticker import MaxNLocator
from matplotlib.widgets import Button, Slider
from torch import nn

from attention import FastSelfAttention2d
from prove import conv_to_attention, photo
from runtime import fast_cpu_process

NO_WINDOW = {"agg", "cairo", "pdf", "pgf", "ps", "svg", "template"}  # matplotlib's backends that open none
ALPHAS = np.logspace(-1, np.log10(50), 19)  # the error curve's alphas
ERROR_FLOOR = 1e-17  # an error of exactly 0 is drawn here on the log axes


@contextmanager
def one_thread():
    """Compute in one thread. The products here are tiny, and on a busy 2-core machine two
    threads mostly wait for each other: one forward took 1 s with two, 4 ms with one."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@dataclass
class Shown:
    """The numbers the figure shows now."""
    alpha: float
    K: int
    heads: int  # heads of the layer and of the top-left panel
    head: int  # the chosen head
    center: tuple  # its center Delta (row, col)
    argmax: tuple  # the shift (row, col) where the chosen head's shown map peaks
    error: float  # max |MHSA(X) - conv2d(X)|, read from the panel's title
    kernel_error: float  # max |expressed kernel - conv kernel|, read from the panel's title


class Play:
    """The figure, its sliders by name ("alpha" holds log10 alpha; "K", "head", "row", "col")
    and `shown()`. Built by `build`."""

    def __init__(self, alpha: float, K: int, seed: int, size: int):
        self.seed, self.size, self.K = seed, size, None
        self.x = photo(size).mean(1, keepdim=True).double()  # [1, 1, size, size], gray
        self.fig = fig = plt.figure(figsize=(15, 7.5))
        # The sliders first: each draws the figure as it is made (at once on Agg, which
        # draws at every draw_idle), which is cheap while the panels are not there yet.
        self.sliders = {
            "alpha": Slider(fig.add_axes([0.08, 0.2, 0.35, 0.03]), "alpha", -1, np.log10(50), valinit=np.log10(alpha)),
            "K": Slider(fig.add_axes([0.08, 0.15, 0.35, 0.03]), "K", 3, 7, valinit=K, valstep=[3, 5, 7]),
            "head": Slider(fig.add_axes([0.08, 0.1, 0.35, 0.03]), "head", 0, K * K - 1, valinit=0, valstep=1),
            "row": Slider(fig.add_axes([0.58, 0.2, 0.3, 0.03]), "center row", -1, 1, valinit=0),
            "col": Slider(fig.add_axes([0.58, 0.15, 0.3, 0.03]), "center col", -1, 1, valinit=0),
        }
        grid = fig.add_gridspec(2, 5, left=0.03, right=0.95, bottom=0.3, top=0.86, wspace=0.35, hspace=0.55)
        self.ax = {name: fig.add_subplot(grid[i, j]) for name, (i, j) in {
            "heads": (0, 0), "head": (0, 1), "expressed": (0, 2), "kernel": (0, 3),
            "photo": (1, 0), "conv": (1, 1), "mhsa": (1, 2), "diff": (1, 3)}.items()}
        self.ax["curve"] = fig.add_subplot(grid[:, 4])
        fig.suptitle("Theorem 1: K^2 quadratic heads (eq. 9) against a K x K convolution, float64")
        self.reset = Button(fig.add_axes([0.58, 0.08, 0.12, 0.04]), "reset centers")
        self._images()
        self.set_kernel(K)
        self.sliders["alpha"].on_changed(lambda _: self.update(curve=False))
        self.sliders["K"].on_changed(lambda value: self.set_kernel(int(value)))
        self.sliders["head"].on_changed(lambda _: self.choose_head())
        self.sliders["row"].on_changed(lambda _: self.move_center())
        self.sliders["col"].on_changed(lambda _: self.move_center())
        self.reset.on_clicked(lambda _: self.reset_centers())

    def _images(self):
        ax = self.ax
        self.art = {name: ax[name].imshow(np.zeros((1, 1)), cmap=cmap) for name, cmap in (
            ("heads", None), ("head", "viridis"), ("expressed", "RdBu_r"),
            ("kernel", colormaps["RdBu_r"].with_extremes(bad="0.8")),  # gray: shifts outside the kernel
            ("photo", "gray"), ("conv", "gray"), ("mhsa", "gray"), ("diff", "magma"))}
        self.art["diff"].set_clim(-17, 0)
        self.fig.colorbar(self.art["diff"], ax=ax["diff"], fraction=0.046, pad=0.04)
        for name in ("heads", "head"):
            self.art[name + " query"] = ax[name].scatter([0], [0], s=120, marker="s", facecolors="none",
                                                         edgecolors="white")
            self.art[name + " center"] = ax[name].scatter([0], [0], s=80, marker="+", color="white")
        self.art["argmax"] = ax["head"].scatter([0], [0], s=60, marker="x", color="red")
        (self.art["curve"],) = ax["curve"].loglog(ALPHAS, ALPHAS, "-", color="C0")
        (self.art["now"],) = ax["curve"].loglog([1], [1], "o", color="C3")
        ax["curve"].set_xlabel("alpha")
        ax["curve"].set_ylabel("max |MHSA(X) - conv2d(X)|")
        ax["curve"].yaxis.set_label_position("right")
        ax["curve"].yaxis.tick_right()
        ax["curve"].set_ylim(ERROR_FLOOR / 10, 10)
        ax["curve"].grid(True, which="major", alpha=0.3)
        for name, title in (("photo", "X: prove.photo(), gray"), ("conv", "F.conv2d(X, the conv's kernel)")):
            ax[name].set_title(title, fontsize=9)
        ax["diff"].set_title("log10 |MHSA(X) - conv2d(X)|", fontsize=9)
        ax["kernel"].set_title("the conv's kernel\n(gray: outside K x K)", fontsize=9)
        for name in ("heads", "head", "expressed", "kernel"):
            ax[name].xaxis.set_major_locator(MaxNLocator(integer=True))
            ax[name].yaxis.set_major_locator(MaxNLocator(integer=True))
            ax[name].set_xlabel("col shift")
            ax[name].set_ylabel("row shift")
        self.art["photo"].set_data(self.x[0, 0].numpy())
        self.art["photo"].set_clim(0, 1)
        for name in ("photo", "conv", "mhsa", "diff"):
            self.art[name].set_extent((-0.5, self.size - 0.5, self.size - 0.5, -0.5))
            ax[name].set_axis_off()

    # ---- what the sliders do -------------------------------------------------------------

    def set_kernel(self, K: int):
        """A new random K x K conv (seeded) and its K^2 heads on the kernel shifts (Lemma 1)."""
        if K == self.K:
            return
        self.K, self.R = K, K // 2 + 2  # the top panels show the shifts -R..R
        torch.manual_seed(self.seed)
        self.conv = nn.Conv2d(1, 1, K, padding=K // 2, bias=False).double()
        self.layer = conv_to_attention(self.conv, 10 ** self.sliders["alpha"].val)
        fast = FastSelfAttention2d(1, heads=K * K, grid=self.layer.attention.grid, out_dim=1).double()
        fast.load_state_dict(self.layer.attention.state_dict())
        self.layer.attention = fast
        self.shifts = fast.encoding.centers.detach().clone()  # [heads, 2]: Delta^(h), row-major
        hue = (np.arange(K * K) * 0.618) % 1  # neighbouring heads far apart in hue
        self.colors = hsv_to_rgb(np.stack([hue, np.full_like(hue, 0.9), np.ones_like(hue)], 1))  # [heads, 3]
        extent = (-self.R - 0.5, self.R + 0.5, self.R + 0.5, -self.R - 0.5)  # rows grow downwards
        for name in ("heads", "head", "expressed", "kernel"):
            self.art[name].set_extent(extent)
        kernel = np.full((2 * self.R + 1,) * 2, np.nan)
        kernel[2:-2, 2:-2] = self.conv.weight[0, 0].detach().numpy()
        self.art["kernel"].set_data(kernel)
        self.art["kernel"].set_clim(-np.abs(kernel[2:-2, 2:-2]).max(), np.abs(kernel[2:-2, 2:-2]).max())
        head = self.sliders["head"]
        head.valmax = K * K - 1
        head.ax.set_xlim(0, K * K - 1)
        for name in ("row", "col"):
            self.sliders[name].valmin, self.sliders[name].valmax = -self.R, self.R
            self.sliders[name].ax.set_xlim(-self.R, self.R)
        self._quietly("head", 0)
        self.choose_head(update=False)
        self.update()

    def choose_head(self, update: bool = True):
        """Put the center sliders on the chosen head's center, their red ticks on its kernel shift."""
        center, shift = self.layer.attention.encoding.centers[self.head], self.shifts[self.head]
        for name, value, home in zip(("row", "col"), center.tolist(), shift.tolist()):
            self.sliders[name].valinit = home
            self.sliders[name].vline.set_xdata([home, home])
            self._quietly(name, value)
        if update:
            self.update(curve=False)

    def move_center(self):
        with torch.no_grad():
            self.layer.attention.encoding.centers[self.head] = torch.tensor(
                [self.sliders["row"].val, self.sliders["col"].val], dtype=torch.float64)
        self.update()

    def reset_centers(self):
        with torch.no_grad():
            self.layer.attention.encoding.centers.copy_(self.shifts)
        self.choose_head(update=False)
        self.update()

    def _quietly(self, name: str, value: float):
        """Move a slider without its callbacks and without drawing: the caller updates."""
        slider = self.sliders[name]
        slider.eventson = slider.drawon = False
        slider.set_val(value)
        slider.eventson = slider.drawon = True

    @property
    def head(self) -> int:
        return int(self.sliders["head"].val)

    # ---- the computation -----------------------------------------------------------------

    @torch.no_grad()
    def error(self, alpha: float):
        """MHSA(X), conv2d(X) and max |MHSA(X) - conv2d(X)| at this alpha, the centers as they are."""
        self.layer.attention.encoding.alpha = alpha
        mhsa = self.layer(self.x)  # [1, 1, size, size]
        conv = F.conv2d(self.x, self.conv.weight, padding=self.K // 2)  # the reference, apart from the layer
        return mhsa, conv, (mhsa - conv).abs().max().item()

    def central_probs(self) -> torch.Tensor:
        """P_h[q, k] for the central query q over every key of the padded grid (eq. 9, then a
        softmax over the keys, eq. 1): [heads, Hp, Wp], indexed by the key."""
        Hp, Wp = self.layer.attention.grid
        q = self.size // 2 + self.K // 2  # the central pixel, in the padded grid
        rows, cols = torch.meshgrid(torch.arange(Hp) - q, torch.arange(Wp) - q, indexing="ij")
        delta = torch.stack([rows, cols], -1).double()  # [Hp, Wp, 2]: k - q
        logits = self.layer.attention.encoding.logits(delta)  # [heads, Hp, Wp]
        return logits.flatten(1).softmax(-1).view(-1, Hp, Wp)

    @torch.no_grad()
    def update(self, curve: bool = True):
        """Recompute every panel; the error curve only when asked (centers or K moved)."""
        alpha = 10 ** self.sliders["alpha"].val
        self.sliders["alpha"].valtext.set_text(f"{alpha:.3g}")
        with one_thread():
            if curve:
                errors = np.array([self.error(a)[2] for a in ALPHAS])
                self.art["curve"].set_ydata(np.maximum(errors, ERROR_FLOOR))
            mhsa, conv, error = self.error(alpha)
            P = self.central_probs()  # [heads, Hp, Wp]
        W = self.layer.attention.W_out.weight[0]  # [heads]: W^(h), one number each for one channel
        expressed = torch.einsum("hij,h->ij", P, W)  # eq. 12 at the query, as a kernel over the keys
        K, R, q = self.K, self.R, self.size // 2 + self.K // 2
        kernel = torch.zeros_like(expressed)
        kernel[q - K // 2:q + K // 2 + 1, q - K // 2:q + K // 2 + 1] = self.conv.weight[0, 0]
        kernel_error = (expressed - kernel).abs().max().item()
        window = P[:, q - R:q + R + 1, q - R:q + R + 1].numpy()  # [heads, 2R+1, 2R+1], shifts -R..R
        mixed = np.einsum("hij,hc->ijc", window, self.colors)  # [2R+1, 2R+1, 3]
        self.art["heads"].set_data(mixed / mixed.max())
        chosen = window[self.head]
        self.art["head"].set_data(chosen)
        self.art["head"].set_clim(0, chosen.max())
        peak = np.unravel_index(chosen.argmax(), chosen.shape)
        self.art["argmax"].set_offsets([[peak[1] - R, peak[0] - R]])
        row, col = self.layer.attention.encoding.centers[self.head].tolist()
        for name in ("heads", "head"):
            self.art[name + " center"].set_offsets([[col, row]])
        self.art["expressed"].set_data(expressed[q - R:q + R + 1, q - R:q + R + 1].numpy())
        self.art["expressed"].set_clim(*self.art["kernel"].get_clim())
        for name, y in (("conv", conv), ("mhsa", mhsa)):
            self.art[name].set_data(y[0, 0].numpy())
            self.art[name].set_clim(conv.min().item(), conv.max().item())
        self.art["diff"].set_data(np.log10(np.maximum((mhsa - conv).abs()[0, 0].numpy(), ERROR_FLOOR)))
        self.art["now"].set_data([alpha], [max(error, ERROR_FLOOR)])
        ax = self.ax
        ax["heads"].set_title(f"all {K * K} heads' P_h[q, q + delta]\n(+: head {self.head}'s center)", fontsize=9)
        ax["head"].set_title(f"head {self.head}, center ({row:+.2f}, {col:+.2f}):\n"
                             f"peak {chosen.max():.2f} at ({peak[0] - R:+d}, {peak[1] - R:+d})", fontsize=9)
        ax["expressed"].set_title(f"the heads' kernel sum_h P_h W^(h)\nmax |it - conv's| = {kernel_error:.2e}",
                                  fontsize=9)
        ax["mhsa"].set_title(f"MHSA(X)\nmax |MHSA - conv2d| = {error:.2e}", fontsize=9)
        ax["curve"].set_title(f"error against alpha, these centers\n(dot: alpha = {alpha:.3g})", fontsize=9)
        self.fig.canvas.draw_idle()

    def shown(self) -> Shown:
        """The numbers on the figure, read from its titles and images."""
        def number(name):
            return float(re.search(r"= (\S+)$", self.ax[name].get_title()).group(1))

        chosen = self.art["head"].get_array()
        peak = np.unravel_index(np.argmax(chosen), chosen.shape)
        return Shown(alpha=10 ** self.sliders["alpha"].val, K=self.K, heads=self.layer.attention.heads,
                     head=self.head, center=(self.sliders["row"].val, self.sliders["col"].val),
                     argmax=(int(peak[0]) - self.R, int(peak[1]) - self.R),
                     error=number("mhsa"), kernel_error=number("expressed"))

    def save(self, path: str = "runs/play_theorem.png") -> Path:
        """The figure as it is now, to a PNG (its folder made)."""
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self.fig.savefig(path)
        return Path(path)


def build(alpha: float = 1.0, K: int = 3, seed: int = 0, size: int = 32) -> Play:
    """The interactive figure of Theorem 1 for a random K x K conv (seed) on a size x size photo."""
    return Play(alpha, K, seed, size)


def main():
    fast_cpu_process()
    play = build()  # held until the window closes: the sliders need it
    if plt.get_backend().lower() not in NO_WINDOW:
        plt.show()
    else:  # no display: nothing would show
        print(f"no display (matplotlib's backend is {plt.get_backend()}): wrote {play.save()}, the figure at its "
              "start; this module's docstring moves the sliders without one")


if __name__ == "__main__":
    main()
