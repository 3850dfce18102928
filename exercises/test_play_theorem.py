"""Tests of the interactive figure of Theorem 1 (exercises/play_theorem.py), without a display:
the sliders are moved in code and the numbers read back from the figure's titles and images.

    python -m pytest -q exercises/test_play_theorem.py
"""
import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.backends.backend_agg import FigureCanvasAgg
import pytest
import torch
import torch.nn.functional as F

from exercises.play_theorem import build, main, one_thread
from prove import conv_to_attention


@pytest.fixture(autouse=True)
def no_idle_draws(monkeypatch):
    """Agg renders the whole figure at every draw_idle (a window waits for an idle moment and
    renders once); the tests read the artists, and test_changing_K_rebuilds_the_heads renders."""
    monkeypatch.setattr(FigureCanvasAgg, "draw_idle", lambda self, *args, **kwargs: None)


@pytest.fixture
def play():
    play = build(alpha=1.0, K=3)
    yield play
    plt.close(play.fig)


def test_raising_alpha_lowers_the_error(play):
    errors = []
    for alpha in (1, 5, 20):
        play.sliders["alpha"].set_val(math.log10(alpha))
        assert play.shown().alpha == pytest.approx(alpha)
        errors.append(play.shown().error)
    assert errors[0] > errors[1] > errors[2], errors
    assert errors[2] < 1e-6, errors  # a random 3x3 conv, float64: about 2e-9 at alpha 20


def test_moving_a_head_moves_its_map_and_the_error_grows(play):
    play.sliders["alpha"].set_val(math.log10(20))
    assert play.shown().head == 0 and play.shown().argmax == (-1, -1)  # head 0 on the shift (-1, -1)
    on_shift = play.shown().error
    play.sliders["row"].set_val(1)
    play.sliders["col"].set_val(1)
    shown = play.shown()
    assert shown.center == (1, 1) and shown.argmax == (1, 1), shown
    assert shown.error > 1e3 * on_shift, (on_shift, shown.error)  # shift (-1, -1) is no head's now
    play.reset_centers()
    assert play.shown().argmax == (-1, -1) and play.shown().error == on_shift


def test_changing_K_rebuilds_the_heads(play):
    for K in (5, 7):
        play.sliders["K"].set_val(K)
        shown = play.shown()
        assert (shown.K, shown.heads, shown.head) == (K, K * K, 0)
        assert play.sliders["head"].valmax == K * K - 1
        assert shown.argmax == (-(K // 2), -(K // 2))  # head 0 on the kernel's first shift
        kernel = play.art["kernel"].get_array()
        assert kernel.count() == K * K  # the conv's kernel, gray (masked) outside K x K
    play.sliders["head"].set_val(K * K - 1)
    assert play.shown().center == (K // 2, K // 2)
    play.fig.canvas.draw()


def test_the_numbers_are_the_paper_layers():
    """The figure's MHSA runs the fast layer and its maps eq. 9 directly: both held to the
    paper's SelfAttention2d (conv_to_attention, untouched) and F.conv2d, on a 16 x 16 photo."""
    play = build(alpha=2.0, K=3, size=16)
    paper = conv_to_attention(play.conv, 2.0)
    with torch.no_grad(), one_thread():
        error = (paper(play.x) - F.conv2d(play.x, play.conv.weight, padding=1)).abs().max().item()
        P = paper.attention.attention_probs()  # [heads, T, T] over the padded 18 x 18 grid
    assert play.shown().error == pytest.approx(error, rel=1e-2)  # the title gives 3 digits
    q = 9 * 18 + 9  # the central pixel (8, 8), padded by one ring
    window = P[0, q].view(18, 18)[9 - 3:9 + 4, 9 - 3:9 + 4]  # head 0, shifts -3..3
    torch.testing.assert_close(torch.as_tensor(play.art["head"].get_array()), window, rtol=1e-12, atol=1e-15)
    plt.close(play.fig)


def test_without_a_display_the_command_writes_its_figure_and_says_where(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    main()
    assert (tmp_path / "runs" / "play_theorem.png").stat().st_size > 10_000
    assert "no display" in capsys.readouterr().out
    plt.close("all")
    play = build(alpha=5.0)
    play.sliders["alpha"].set_val(1.0)  # the docstring's route: sliders by name, then save
    assert play.save("runs/deeper/theorem1.png").stat().st_size > 10_000
    plt.close(play.fig)
