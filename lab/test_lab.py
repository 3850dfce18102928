"""The lab's tests: compare.py (seeds as experiments), bench.py, the GPU command, and the
notebook's citations. `python -m pytest -q lab/test_lab.py` (or `python -m pytest -q`, both suites)."""
import dataclasses
import fnmatch
import glob
import json
import math
import os
import re
import shlex
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import attention
import data as data_lib
import measures
import model as model_lib
import prove
import prune as prune_lib
import records
import train as train_lib
import visualize as viz
from attention import ENCODINGS
from lab import bench, compare, experiments, lease, plots
from test_all import check_commands, flushes_subnormals, needs_cuda, not_blank, small_config

ROOT = Path(__file__).resolve().parent.parent


# ---- The GPU command and bench.py ------------------------------------------------------------

TINY = ["--dataset", "synthetic", "--subset", "1000", "--layers", "1", "--dim", "16", "--ffn-dim", "16", "--heads", "4",
        "--batch-size", "50", "--device", "cpu", "--precision", "fp32"]  # 20 steps an epoch


def gpu_command(out: Path, seconds: int, call_seconds: int) -> subprocess.CompletedProcess:
    """lab/gpu.sh on this CPU: the tiny model on the synthetic set, eager and CUDA graphs (refused here)."""
    return subprocess.run(["bash", "lab/gpu.sh", "unused", str(out), str(seconds), *TINY], capture_output=True,
                          text=True, cwd=ROOT, timeout=600, env=dict(os.environ, PYTHON=sys.executable, OMP_NUM_THREADS="1", GPU_STEPS="10",
                                                                     GPU_MODES="eager,reduce-overhead",
                                                                     GPU_CALL_SECONDS=str(call_seconds)))


@pytest.mark.slow
def test_the_gpu_command_times_the_modes_trains_in_the_fastest_that_agrees_and_a_second_call_continues(tmp_path):
    """A first call benches, chooses the mode and the epochs 60 s hold, and is stopped at its call's
    limit, saved; a second call continues the run to its end and benches nothing."""
    first = gpu_command(tmp_path, 60, 40)
    bench = tmp_path / "modes.txt"  # a bench that failed: its error
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:] + (bench.read_text()[-2000:]
                                                                                 if bench.exists() else "")
    modes = json.loads((tmp_path / "modes.json").read_text())
    rows = {r["mode"]: r for r in modes["rows"]}
    assert rows["reduce-overhead"]["error"] == "CUDA graphs need a CUDA device" and "losses" not in rows["reduce-overhead"]
    assert len(rows["eager"]["losses"]) == 15 and rows["eager"]["agrees"] and modes["fastest"] == "eager"
    epochs = int(60 / (1.05 * modes["fastest_epoch_s"]))
    config = json.loads((tmp_path / "width400" / "config.json").read_text())
    assert (config["epochs"], config["compile"], config["eval_every"], config["log_every"], config["seed"]) == (
        epochs, "", 5, 500, 0)
    assert (config["encoding"], config["lr"], config["attention_dropout"], config["dropout"]) == ("quadratic", 0.1, 0.1, 0.1)
    saved = torch.load(tmp_path / "width400" / "checkpoint.pt", weights_only=True)
    assert saved["epoch"] * 20 + saved["step"] > 0 and saved["epoch"] < epochs  # stopped mid-run, saved
    assert "train.py: exit 130" in (tmp_path / "gpu.log").read_text()

    second = gpu_command(tmp_path, 60, 300)
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-2000:]
    log = (tmp_path / "gpu.log").read_text()
    assert "continuing" in log and log.rstrip().splitlines()[-1].endswith("train.py: exit 0 (0: finished; 130: stopped "
                                                                            "at the call's limit and saved, continued "
                                                                            "by the same command)")
    assert json.loads((tmp_path / "modes.json").read_text()) == modes
    metrics = [json.loads(l) for l in (tmp_path / "width400" / "metrics.jsonl").read_text().splitlines()]
    assert [m["epoch"] for m in metrics] == list(range(1, epochs + 1))
    assert [m["epoch"] for m in metrics if m["test_acc"] is not None] == [e for e in range(1, epochs + 1)
                                                                         if e % 5 == 0 or e == epochs]
    assert {p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file()} == {
        "gpu.log", "modes.json", "modes.txt", "width400.log", "width400/config.json", "width400/metrics.jsonl",
        "width400/heads.jsonl", "width400/steps.jsonl", "width400/checkpoint.pt"}


def test_the_lease_bench_compares_with_eager_first():
    with pytest.raises(ValueError, match="eager first"):
        lease.time_modes(lease.Config(modes="default,eager"))


@pytest.mark.gpu
@needs_cuda
def test_bench_times_the_papers_model_on_cuda_against_its_measured_peak(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["bench.py", "--quick", "--devices", "cuda", "--repeats", "2",
                                      "--json", str(tmp_path / "bench.json")])
    bench.main()
    rows = json.loads((tmp_path / "bench.json").read_text())["rows"]
    models = [r for r in rows if r["device"] == "cuda" and r["kind"] == "model"]
    assert {r["name"] for r in models} >= {"paper model quadratic", "paper model, attention dropout"}
    assert all(0 < r["utilization"] < 1 for r in models)


def test_bench_counts_the_flops_of_the_step_that_trains():
    """The authors' attention dropout (the default) turns the factorization off: the step counts the dense products."""
    def step_gflop(**overrides):
        model = model_lib.build_model("quadratic", layer=model_lib.FastSelfAttention2d, **overrides).to("meta")
        return model_lib.counted_flops(model, training=True) / 1e9

    dropout, factorized = step_gflop(), step_gflop(attention_dropout=0.0)
    assert dropout == pytest.approx(27.02, abs=0.01) and factorized < dropout
    eval_forward = model_lib.counted_flops(model_lib.build_model("quadratic").to("meta")) / 1e9
    assert dropout == pytest.approx(3 * eval_forward, rel=1e-3)  # backward: twice the forward's products


def test_bench_rows_run_on_a_non_cpu_device():
    """A model on `meta` (shapes, no values): any input or constant bench makes on the CPU beside it fails."""
    device = torch.device("meta")
    model = model_lib.build_model("quadratic", layers=1, dim=16, ffn_dim=16, heads=4,
                                  layer=model_lib.FastSelfAttention2d).to(device)
    bench.training_step(model, 2, device)(torch.float32)
    assert model_lib.counted_flops(model, training=True) > 0
    (row,) = bench.bench_operators(device, bench.Config(quick=True))
    assert row["operators"] > 0 and row["views"] > 0


def test_a_training_step_dispatches_fewer_operators_than_a_step_of_the_per_parameter_sgd():
    """train.py's SGD (fused) and the fast layer's one product over the heads: fewer operators than
    PyTorch's default SGD on a CPU (a loop over the parameters), the same step."""
    (row,) = bench.bench_operators(torch.device("cpu"), bench.Config(quick=True))
    model = model_lib.build_model("quadratic", layer=model_lib.FastSelfAttention2d, layers=2, dim=32, ffn_dim=32, heads=4)
    loop = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4, foreach=False)
    images, labels = torch.randn(2, 3, 32, 32), torch.randint(0, 10, (2,))
    for _ in range(2):
        with bench.Operators() as counted:
            with train_lib.autocast(torch.device("cpu"), row["precision"]):
                loss = torch.nn.functional.cross_entropy(model.train()(images).float(), labels)
            loop.zero_grad(set_to_none=True)
            loss.backward()
            loop.step()
    assert row["operators"] < counted.operators - 2 * len(list(model.parameters()))


def test_bench_times_queued_calls_on_a_gpu_and_one_call_on_the_cpu(monkeypatch):
    """A GPU round times GPU_CALLS calls between two synchronizations (their launches overlap the
    work, as training's steps do), divided by GPU_CALLS; a CPU round times one call."""
    calls = []
    monkeypatch.setattr(bench, "sync", lambda device: calls.append("sync"))
    for device, per_round in ((torch.device("cpu"), 1), (torch.device("cuda"), bench.GPU_CALLS)):
        calls.clear()
        bench.measure({"step": lambda: calls.append("step")}, device, repeats=3, warmup=2)
        timed = "".join("s" if c == "sync" else "x" for c in calls[2:])  # after the warm-up's 2 calls
        assert calls[:2] == ["step", "step"] and timed == ("s" + "x" * per_round + "s") * 3


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_bench_asking_for_cuda_without_it_is_refused_in_one_line():
    result = subprocess.run([sys.executable, "-m", "lab.bench", "--devices", "cuda"], capture_output=True, text=True,
                            cwd=ROOT, timeout=120)
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.splitlines() == ["error: --devices cuda: this machine has no CUDA device; use --devices cpu or auto"]


def test_bench_flushes_subnormals_in_every_thread():
    assert flushes_subnormals("lab.bench")


@pytest.mark.slow  # it trains or times training: seconds to a minute on 2 cores
def test_bench_writes_each_table_as_it_finishes(tmp_path, monkeypatch):
    written = []
    real_dump = json.dump
    monkeypatch.setattr(json, "dump", lambda obj, f, **kw: (written.append(len(obj["rows"])), real_dump(obj, f, **kw)))
    monkeypatch.setattr(sys, "argv", ["bench", "--quick", "--devices", "cpu", "--repeats", "1", "--json",
                                      str(tmp_path / "b.json")])
    bench.main()
    assert len(written) == 4 and written == sorted(written) and written[0] > 0


@pytest.mark.slow  # it trains or times training: seconds to a minute on 2 cores
def test_bench_quick_measures_every_encoding(monkeypatch):
    threads = torch.get_num_threads()
    monkeypatch.setattr(bench, "choose_precision", lambda device: ("bf16", "bf16: faked"))
    rows = bench.bench_layers(torch.device("cpu"), bench.Config(quick=True, repeats=1))
    names = [r["name"] for r in rows]
    assert names[1:] == ["quadratic", "quadratic+dense path"] + list(ENCODINGS)[1:] + ["quadratic+content"] + [
        f"{e}+attn dropout" for e in ENCODINGS] + ["quadratic+dense path+bf16", "quadratic+attn dropout+bf16",
                                                   "gaussian+attn dropout+bf16"]
    assert all(r["fast_s"] > 0 and r["fast_bytes"] > 0 for r in rows)
    torch.manual_seed(0)  # "dense path" holds the fast layer to its dense path, computing the same layer
    fast, held = attention.FastSelfAttention2d(16, 4, (4, 4), "quadratic"), bench.DensePath(16, 4, (4, 4), "quadratic")
    held.load_state_dict(fast.state_dict())
    x = torch.randn(2, 4, 4, 16)
    assert fast.factorized and not held.factorized
    torch.testing.assert_close(held(x), fast(x))
    (subnormals,) = bench.bench_subnormals(torch.device("cpu"), bench.Config(quick=True, repeats=1))
    assert subnormals["speedup"] == subnormals["computed_s"] / subnormals["flushed_s"] > 0
    assert torch.get_num_threads() == threads  # restored after its one-thread measurement
    models = bench.bench_models(torch.device("cpu"), bench.Config(quick=True, repeats=1))
    assert [r["name"] for r in models[::2]] == [name for name, *_ in bench.model_sizes(True)]
    assert [r["precision"] for r in models[:2]] == ["float32", "bfloat16"]
    assert all(r["images_per_s"] > 0 and 0 < r["utilization"] and r["gflop_per_image"] > 0 for r in models)
    for r in models:  # utilization is the step's FLOP/s over the peak timed beside it
        step_flops = r["gflop_per_image"] * 1e9 * r["images_per_s"]
        assert r["utilization"] == pytest.approx(step_flops / r["peak_flop_per_s"])


def test_bench_times_bf16_only_where_the_cpu_computes_it_natively(monkeypatch, capsys):
    monkeypatch.setattr(bench, "choose_precision", lambda device: ("fp32", "fp32: CPU bf16 product 0.01x fp32"))
    rows = bench.bench_models(torch.device("cpu"), bench.Config(quick=True, repeats=1))
    assert {r.get("precision") for r in rows} == {"float32", None}
    bench.print_tables(rows + bench.bench_layers(torch.device("cpu"), bench.Config(quick=True, repeats=1)), {"cpu": "a CPU"})
    out = capsys.readouterr().out
    assert "bf16 not timed (fp32: CPU bf16 product 0.01x fp32)" in out
    assert len([line for line in out.splitlines() if line.startswith("tiny ") and line.split()[-1] == "-"]) == 3


# ---- Seeds: runs that differ only in seed are one experiment ---------------------------------

def write_run(path: Path, seed: int, accs: list, layer: dict = None, **config):
    path.mkdir(parents=True)
    record = dict(encoding="quadratic", lr=0.05, seed=seed, out=str(path), environment={"commit": str(seed)}) | config
    (path / "config.json").write_text(json.dumps(record))
    lines = [dict(epoch=e + 1, test_acc=a, seconds=60.0 * (e + 1) * (seed + 1)) | ({"layers": [layer]} if layer else {})
             for e, a in enumerate(accs)]
    (path / "metrics.jsonl").write_text("".join(json.dumps(l) + "\n" for l in lines))
    return path


def test_runs_differing_only_in_seed_are_one_experiment_with_mean_and_spread(tmp_path):
    found = lambda ring, loc: dict(locality_3x3=loc, locality_5x5=0.9, one_pixel=ring + 1, ring=ring, sides=4, coverage=ring)
    runs = [write_run(tmp_path / f"a{s}", s, [0.3, acc], found(ring, loc))
            for s, acc, ring, loc in ((0, 0.5, 8, 0.7), (1, 0.6, 6, 0.8), (2, 0.7, 7, 0.6))]
    runs.append(write_run(tmp_path / "b0", 0, [0.2, 0.4], lr=0.1))
    runs.append(write_run(tmp_path / "b1", 1, [0.2, 0.4], lr=0.1, min_alpha=0.0))  # a default written out: the same
    groups = experiments.group([experiments.load_run(r) for r in runs])
    assert sorted(len(g) for g in groups.values()) == [2, 3]
    a = experiments.summarize(next(g for g in groups.values() if len(g) == 3))
    assert a["seeds"] == [0, 1, 2] and a["epochs"] == 2
    assert a["test_acc"] == pytest.approx(dict(mean=0.6, std=0.1, min=0.5, max=0.7))  # std over 3 seeds, n - 1
    assert a["minutes"] == pytest.approx(dict(mean=4.0, std=2.0, min=2.0, max=6.0))
    assert a["layers"][0]["ring"] == pytest.approx(dict(mean=7.0, std=1.0, min=6.0, max=8.0))
    assert a["layers"][0]["locality_3x3"]["mean"] == pytest.approx(0.7)
    text = compare.table(groups)
    params = f"{sum(p.numel() for p in model_lib.build_model('quadratic').parameters()):,}"  # A.4's model
    assert (f"| lr=0.05 | not recorded | {params} | 0,1,2 | 2 | 4.0 (2.0-6.0) | 0.600 ± 0.100 (0.500-0.700) | "
            "0.700 (0.600-0.800) | 0.900 | 8.0 (7.0-9.0) | 7.0 (6.0-8.0) / 4.0 / - | 7.0 (6.0-8.0) | - |") in text
    assert f"| lr=0.1 | not recorded | {params} | 0,1 | 2 | 3.0 (2.0-4.0) | 0.400 ± 0.000 (0.400-0.400) | - | - | - | - | - | - |" in text
    assert not_blank(plots.curves_figure(groups, tmp_path / "figs"))
    with pytest.raises(ValueError, match="repeat a seed"):
        experiments.group([experiments.load_run(runs[0]), experiments.load_run(write_run(tmp_path / "again", 0, [0.3, 0.5]))])
    with pytest.raises(FileNotFoundError, match="not a run directory"):
        experiments.load_run(tmp_path)


def test_accuracy_curves_skip_the_epochs_that_a_run_did_not_test(tmp_path, monkeypatch):
    """A run with --eval-every records test_acc None between evaluations: the curve has the tested epochs only."""
    runs = [write_run(tmp_path / f"e{s}", s, [None, 0.3, None, 0.5], eval_every=2) for s in (0, 1)]
    groups = experiments.group([experiments.load_run(r) for r in runs])
    drawn = {}
    monkeypatch.setattr(plots, "band_figure", lambda curves, *a, **k: drawn.update(curves))  # the curves alone
    plots.curves_figure(groups, tmp_path / "figs")
    (x, columns), = drawn.values()
    assert list(x) == [2, 4] and columns == [(0.3, 0.3), (0.5, 0.5)]


def test_a_layer_that_not_every_run_has_is_one_clear_error(tmp_path):
    """--layer 0 had read the last layer (Python's index -1) and --layer 5 of a 2-layer run raised an IndexError."""
    runs = [experiments.load_run(write_run(tmp_path / f"r{n}", 0, [0.5], layers=n)) for n in (2, 6)]
    experiments.check_layers(runs, 2, [1, 6])  # --origins shows a layer for the runs that have it
    for layer, origins, message in ((0, [], r"--layer takes layers 1 to 2 \(every run has them\), got 0"),
                                    (3, [], "got 3"), (1, [0, 1, 7], r"--origins takes layers 1 to 6 .*, got \[0, 7\]")):
        with pytest.raises(ValueError, match=message):
            experiments.check_layers(runs, layer, origins)


def test_the_difference_of_two_experiments_has_welchs_interval_and_p_value(tmp_path):
    # Equal variances (1) and sizes (3): Welch's degrees of freedom are 2 (n - 1) = 4 and its
    # standard error sqrt(1/3 + 1/3). A difference of t_{0.975, 4} = 2.776445 (a t table)
    # standard errors puts the interval's lower end at 0 and the two-sided p-value at 0.05.
    se = math.sqrt(2 / 3)
    shift = 2.776445 * se
    d = experiments.difference([1.0, 2.0, 3.0], [1.0 - shift, 2.0 - shift, 3.0 - shift])
    assert d["difference"] == pytest.approx(shift)
    assert (d["low"], d["high"]) == pytest.approx((0.0, 2 * shift), abs=1e-5)
    assert d["p"] == pytest.approx(0.05, abs=1e-5) and d["n"] == (3, 3)
    data = [dict(name="CIFAR-10", md5="a"), dict(name="CIFAR-10 (JPEG q75 copy)", md5="b")]
    runs = [write_run(tmp_path / f"{name}{s}", s, [acc], data=data[k])
            for k, name, accs in ((0, "a", (1.0, 2.0, 3.0)), (1, "b", (1.0 - shift, 2.0 - shift, 3.0 - shift)))
            for s, acc in enumerate(accs)]
    groups = experiments.group([experiments.load_run(r) for r in runs])
    assert len(groups) == 2  # runs on different data are never one experiment
    assert "| data=CIFAR-10 | CIFAR-10 |" in compare.table(groups)
    text = compare.differences(groups, ["test_acc", "ring"], 1)
    assert f"test_acc: +{shift:.3f}, 95% interval [+0.000, +{2 * shift:.3f}], Welch p = 0.05 (3 and 3 seeds)" in text
    assert "layer 1 ring: not every run has ring for layer 1" in text
    runs.append(write_run(tmp_path / "still-training", 0, [0.1, 0.2], epochs=6))  # stopped at epoch 2 of 6
    text = compare.differences(experiments.group([experiments.load_run(r) for r in runs]), ["test_acc"], 1)
    assert text.count("not compared: epochs=6 stopped at epoch 2 of 6; --at compares steps") == 2
    assert text.count("test_acc: ") == 1  # finished runs of 1 epoch (no epochs recorded) are compared
    assert experiments.end_of([experiments.load_run(runs[-1])]) == "epoch 2 of 6" and experiments.end_of([experiments.load_run(runs[0])]) == "end"


def test_measures_against_steps_tabulated_drawn_and_changed_from_step_0(tmp_path, monkeypatch):
    # Three seeds whose layer-1 mass_5x5 rises from step 0 by 0.1, 0.2 and 0.3: a mean change
    # of 0.2 with sample std 0.1, so Student's 95% interval is 0.2 -+ t_{0.975, 2} 0.1 / sqrt(3),
    # t_{0.975, 2} = 4.302653 (a t table).
    runs = []
    for seed, rise in enumerate((0.1, 0.2, 0.3)):
        run = write_run(tmp_path / f"s{seed}", seed, [0.3, 0.5], log_every=100 * (seed + 1))  # logging: not the experiment
        lines = [{"step": step, "train_loss": None, "heads": [None],
                  "layers": [dict.fromkeys(experiments.CURVES, 1.0) | {"mass_5x5": 0.5 + rise * step / 200,
                                                                   "one_pixel": step // 100 + seed}]}
                 for step in (0, 100, 200)]
        (run / "steps.jsonl").write_text("".join(json.dumps(l) + "\n" for l in lines))
        runs.append(experiments.load_run(run))
    groups = experiments.group(runs)
    assert len(groups) == 1 and experiments.values(runs, "mass_5x5", 1, 200) == pytest.approx([0.6, 0.7, 0.8])
    half = 4.302653 * 0.1 / math.sqrt(3)
    text = compare.changes(groups, ["mass_5x5"], 1, 200)
    assert f"start → step 200: 0.500 → 0.700, change +0.200, 95% interval [{0.2 - half:+.3f}, {0.2 + half:+.3f}]" in text
    assert text.endswith("(3 seeds: 0.500 → 0.600 (+0.100), 0.500 → 0.700 (+0.200), 0.500 → 0.800 (+0.300))")
    table = compare.steps_table(groups, [0, 200], 1)
    assert "| quadratic | 3 | 0 | 1.00 | 1.00 (0.00-2.00) |" in table and "| quadratic | 3 | 200 | 1.00 | 3.00 (2.00-4.00) |" in table
    with pytest.raises(ValueError, match="logged no step 300"):
        experiments.values(runs, "mass_5x5", 1, 300)
    assert not_blank(plots.steps_figure(groups, 1, tmp_path))
    monkeypatch.setattr(sys, "argv", ["compare.py", *(str(r["path"]) for r in runs), "--at", "0", "200",
                                      "--out", str(tmp_path / "cli")])
    compare.main()  # the command line draws the same figure
    assert not_blank(tmp_path / "cli" / "steps_layer1.png")
    with pytest.raises(ValueError, match="no run has steps.jsonl"):
        plots.steps_figure(experiments.group([experiments.load_run(write_run(tmp_path / "none", 0, [0.3]))]), 1, tmp_path)


def test_origins_say_which_one_pixel_pixels_the_start_already_held_and_what_chance_holds(tmp_path):
    # Three heads start at (0.1, 0.9), (1.2, -0.1), (1.1, 0.2): nearest pixels (0, 1), (1, 0), (1, 0).
    # At step 100 they sit on (0, 1), (1, 0), (1, 0) with alpha 10 (one-pixel heads): 2 distinct
    # pixels, both a start's nearest, all 3 heads on their own; (1, 0) shared by heads that began
    # |(1.2, -0.1) - (1.1, 0.2)| = sqrt(0.1) px apart. Dealt the start's pixels at random, head 0
    # gets (0, 1) with probability 1/3 and heads 1, 2 get (1, 0) with 2/3 each: 5/3 expected on
    # their own. At step 200 head 0 moved to (-1, -1): a pixel no head began nearest to (4/3
    # expected); its path is 0.2 + 2.24 px. Alpha 0.5 at the start: no one-pixel head. At step 300
    # heads 0 and 2 widen to alpha 0.1 and 0.2: one is below WIDE = 0.2, one (head 1) still SHARP.
    # The heads began 0.91, 1.20, 1.12 px from the query: head 1, the one sharp head at step 300, began
    # farthest, not among the 1 nearest (chance 1^2 / 3); all 3 sharp at step 100 are the 3 nearest (3^2 / 3).
    start = [[0.1, 0.9], [1.2, -0.1], [1.1, 0.2]]
    later = {100: [[0.0, 1.0], [1.0, 0.0], [1.0, 0.0]], 200: [[-1.0, -1.0], [1.0, 0.0], [1.0, 0.0]]}

    def run_from(name, seed, begun):
        run = write_run(tmp_path / name, seed, [0.3], layers=1, heads=3, dim=6, ffn_dim=6)
        heads = ({0: dict(centers=begun, alpha=[0.5] * 3)} | {s: dict(centers=c, alpha=[10.0, 10.0, 20.0]) for s, c in later.items()}
                 | {300: dict(centers=later[200], alpha=[0.1, 10.0, 0.2])})
        (run / "steps.jsonl").write_text("".join(json.dumps({"step": s, "train_loss": None, "layers": [{}], "heads": [h]}) + "\n"
                                                 for s, h in heads.items()))
        return experiments.load_run(run)

    runs = [run_from(f"s{seed}", seed, start) for seed in (0, 1)]
    found = experiments.run_origins(runs[0], 1)
    assert {k: v for k, v in found[0].items() if k not in ("shared_start_gap", "travel_one_pixel")} == dict(
        travel=[0.0, 0.0, 0.0], travel_mean=0.0, travel_max=0.0, travelled=0, path=0.0, alpha=0.5, wide=0, sharp=0, sharp_began_nearest=0,
        sharp_began_nearest_chance=0.0, start_pixels=2, pixels=[], one_pixel=0, already_nearest=0, own_start=0,
        own_start_chance=0.0, shared=0)
    assert found[0]["shared_start_gap"] is None and found[0]["travel_one_pixel"] is None  # none shared, none one-pixel
    moved = [math.hypot(0.1, 0.1), math.hypot(0.2, 0.1), math.hypot(0.1, 0.2)]
    assert found[100].pop("pixels") == [(0, 1), (1, 0)] and found[200]["pixels"] == [(-1, -1), (1, 0)]
    assert found[100].pop("travel") == pytest.approx(moved, abs=1e-4)  # rounded to 4 places
    assert found[100] == pytest.approx(dict(travel_mean=sum(moved) / 3, travel_max=max(moved), travelled=0,
                                            travel_one_pixel=sum(moved) / 3, path=sum(moved) / 3,
                                            alpha=10.0, wide=0, sharp=3, sharp_began_nearest=3,
                                            sharp_began_nearest_chance=3.0, start_pixels=2, one_pixel=2, already_nearest=2, own_start=3, own_start_chance=5 / 3, shared=1,
                                            shared_start_gap=math.sqrt(0.1)))
    assert found[200]["one_pixel"] == 2 and found[200]["already_nearest"] == 1 and found[200]["own_start"] == 2
    assert found[200]["own_start_chance"] == pytest.approx(4 / 3)
    assert found[200]["path"] == pytest.approx((sum(moved) + math.hypot(1, 2)) / 3)  # head 0: (0, 1) -> (-1, -1)
    assert found[200]["travel_mean"] == pytest.approx((math.hypot(1.1, 1.9) + sum(moved[1:])) / 3)
    assert found[300]["wide"] == 1 and found[300]["sharp"] == 1 and found[300]["one_pixel"] == 1
    assert found[300]["sharp_began_nearest"] == 0 and found[300]["sharp_began_nearest_chance"] == pytest.approx(1 / 3)  # only head 1 still sharp
    # Another seed began nearest to (0, 1), (-1, -1), (2, 0): of seed 0's pixels it holds (0, 1)
    # at step 100 and (-1, -1) at step 200; seed 0's start holds both of its step-100 pixels.
    other = run_from("s2", 2, [[0.1, 0.9], [-1.2, -0.9], [2.1, 0.2]])
    chance = experiments.group_origins([runs[0], other], 1)
    assert [chance[0][s]["already_nearest_other"] for s in (0, 100, 200)] == [0, 1, 1]
    assert chance[1][100]["already_nearest_other"] == 2
    assert experiments.group_origins(runs[:1], 1)[0][100]["already_nearest_other"] is None  # one seed: no other start
    text = compare.origins_table(experiments.group(runs), [0, 100, 200], [1])  # two seeds of one start: chance = own
    fresh = measures.fresh_start_held([(0, 1), (1, 0)], 3, 2.0)  # a fresh start of 3 heads, the default std 2
    assert ("| quadratic | 2 | 1 | 100 | 2.00 | 0.20 | 0.20 | 0.20 | 10.00 | 0.00 | 3.00 | 3.00 | 3.00 | 2.00 | 2.00 | 2.00 "
            f"| {fresh:.2f} | 3.00 | 1.67 | 1.00 | 0.32 |") in text
    assert "| quadratic | 2 | 1 | 0 | 2.00 | 0.00 | - | 0.00 | 0.50 | 0.00 | 0.00 | 0.00 | 0.00 | 0.00 | 0.00 | 0.00 | 0.00 | 0.00 | 0.00 | 0.00 | - |" in text
    pooled = text.splitlines()[-1]  # the last step, the seeds' counts summed, against fresh starts
    assert pooled.startswith("layer 1, step 200, 2 seeds: their own starts held 2 of their 4 one-pixel pixels; a fresh start, ")
    assert "another seed's start" in text.splitlines()[0] and "dealt to the heads at random" in text.splitlines()[0]
    assert compare.origins_table(experiments.group(runs), [0], [1, 4]) == compare.origins_table(experiments.group(runs), [0], [1])
    assert not_blank(plots.origins_figure(experiments.group(runs), [1, 4], tmp_path))  # layer 4: deeper models only
    path = plots.origins_figure(experiments.group(runs), [1], tmp_path, x="position_lr")
    assert path.name == "origins_layers1_position_lr.png" and not_blank(path)
    with pytest.raises(ValueError, match="logged no heads with centers for layer 1"):
        experiments.run_origins(experiments.load_run(write_run(tmp_path / "none", 0, [0.3])), 1)


def test_summed_position_lr_follows_the_schedule_of_the_run():
    config = dict(epochs=2, batch_size=100, subset=400, dataset="synthetic", lr=0.1, position_lr=10.0, warmup=0.25)
    # 4 steps an epoch, 8 in all, 2 of warm-up (1/2, 1), then (1 + cos(pi (t - 2) / 6)) / 2 for t = 2..7
    factors = [0.5, 1.0, 1.0, (2 + 3**0.5) / 4, 0.75, 0.5, 0.25, (2 - 3**0.5) / 4]  # summing to 5
    factor = train_lib.warmup_cosine(8, 0.25)
    assert [factor(t) for t in range(8)] == pytest.approx(factors, abs=1e-12)
    assert experiments.position_lr_sum(config, [0, 1, 2, 8]) == pytest.approx([0.0, 0.5, 1.5, 5.0])
    assert experiments.position_lr_sum(config | dict(position_lr=1.0), [8]) == pytest.approx([0.5])


def test_training_loss_between_logged_steps_is_recovered_from_the_running_means(tmp_path):
    per_step = [4, 2, 3, 1, 1, 1, 5, 5]  # 2 epochs of 4 steps; the epoch's running mean logged
    running = lambda s: statistics.fmean(per_step[(s - 1) // 4 * 4:s])
    config = dict(epochs=2, batch_size=100, subset=400, dataset="synthetic")
    runs = []
    for seed, every in ((0, 2), (1, 3)):
        path = write_run(tmp_path / f"r{seed}", seed, [0.3, 0.4], **config)
        lines = [dict(step=0, train_loss=None, layers=[])] + \
                [dict(step=s, train_loss=running(s), layers=[]) for s in range(every, 9, every)]
        (path / "steps.jsonl").write_text("".join(json.dumps(l) + "\n" for l in lines))
        runs.append(experiments.load_run(path))
    # every 2: each interval's own mean; every 3: step 6 opens epoch 1, so from that epoch's start
    assert experiments.interval_losses(runs[0]) == pytest.approx({2: 3.0, 4: 2.0, 6: 1.0, 8: 5.0})
    assert experiments.interval_losses(runs[1]) == pytest.approx({3: 3.0, 6: 1.0})
    assert not_blank(plots.loss_figure(experiments.group(runs[:1]), tmp_path / "figs"))


def test_compare_measures_a_runs_start_from_its_seed_when_heads_jsonl_agrees(tmp_path):
    cfg = small_config(tmp_path, epochs=1)
    train_lib.main(cfg)
    torch.manual_seed(cfg.seed)
    start = measures.layer_measures(model_lib.model_from_config(dataclasses.asdict(cfg)))[0]
    found = experiments.load_run(cfg.out)["metrics"][-1]["layers"][0]
    assert found["start_locality_3x3"] == pytest.approx(start["locality_3x3"]) and "travelled" in found
    assert found["start_locality_3x3"] != pytest.approx(found["locality_3x3"])
    heads = Path(cfg.out) / "heads.jsonl"
    lines = heads.read_text().splitlines()
    other = json.loads(lines[0])
    other["layers"][0]["centers"][0][0] += 0.01  # a start that the seed does not rebuild
    heads.write_text("\n".join([json.dumps(other)] + lines[1:]) + "\n")
    assert "start_locality_3x3" not in experiments.load_run(cfg.out)["metrics"][-1]["layers"][0]


def test_each_seeds_fig2_side_by_side_from_heads_jsonl(tmp_path):
    runs = []
    for seed in (0, 1):
        run = write_run(tmp_path / f"s{seed}", seed, [0.3, 0.5])
        snapshots = [{"epoch": e, "layers": [{"centers": (kernel * (0.5 + e)).tolist(), "alpha": [0.5 + 2 * e] * 9}]}
                     for e, kernel in enumerate([attention.kernel_shifts(9)] * 3)]
        (run / "heads.jsonl").write_text("".join(json.dumps(s) + "\n" for s in snapshots))
        runs.append(experiments.load_run(run))
    path = plots.grids_figure(runs + [experiments.load_run(write_run(tmp_path / "no-heads", 2, [0.4]))], 1, tmp_path)
    assert path.name == "fig2_side_by_side_layer1.png" and not_blank(path)
    with pytest.raises(ValueError, match="no run has head centers"):
        plots.grids_figure([experiments.load_run(tmp_path / "no-heads")], 1, tmp_path)


def test_central_query_maps_side_by_side_from_heads_jsonl(tmp_path):
    net = model_lib.build_model("learned", layers=1, dim=8, ffn_dim=8, heads=4)
    snapshot = records.head_snapshot(net)
    central = torch.tensor(snapshot[0]["central"])  # [heads, 16, 16], 4 decimals
    torch.testing.assert_close(central, measures.central_probs(net.attention_layers[0]), atol=5e-5, rtol=0)
    run = write_run(tmp_path / "learned-s0", 0, [0.4], encoding="learned")
    (run / "heads.jsonl").write_text(json.dumps({"epoch": 1, "layers": snapshot}) + "\n")
    runs = [experiments.load_run(run), experiments.load_run(write_run(tmp_path / "no-heads", 1, [0.4]))]
    assert not_blank(plots.maps_figure(runs, 1, tmp_path))
    with pytest.raises(ValueError, match="no run has central-query probabilities"):
        plots.maps_figure(runs[1:], 1, tmp_path)


# ---- The notebook: every run it holds is cited, every command it shows is accepted -----------
def notebook() -> str:
    """lab/RESULTS.md's text; the test is skipped in a students' copy, which leaves the notebook out."""
    path = ROOT / "lab" / "RESULTS.md"
    if not path.exists():
        pytest.skip("lab/RESULTS.md is not in a students' copy")
    return path.read_text()


def test_every_run_and_file_under_results_is_cited_by_the_documentation():
    text = (ROOT / "README.md").read_text() + notebook()
    cited = set()
    for token in re.findall(r"lab/results/[\w\-./*\[\]{},]+", text):
        token = re.sub(r"(?<=-s)S\b", "*", token.rstrip(".,)"))  # seed placeholder: -sS
        braces = re.search(r"\{([^}]*)\}", token)
        cited |= {token.replace(braces.group(0), b) for b in braces.group(1).split(",")} if braces else {token}
    results = ROOT / "lab" / "results"
    for entry in [p.parent for p in results.rglob("config.json")] + list(results.glob("*.*")):
        name = entry.relative_to(ROOT).as_posix()
        assert any(fnmatch.fnmatch(name, c) or name.startswith(c.rstrip("/") + "/") or c.startswith(name + "/")
                   for c in cited), f"{name} is cited by neither README.md nor lab/RESULTS.md"


def test_every_command_in_the_notebook_is_accepted_by_todays_code():
    notebook()
    check_commands(ROOT / "lab" / "RESULTS.md", dict(bench=bench, compare=compare, lease=lease, prove=prove,
                                                     prune=prune_lib, visualize=viz, data=data_lib))


def test_a_runs_config_is_read_as_the_model_it_built_never_refused():
    """Learned runs recorded `grid_start: true` and gaussian runs `min_alpha: 1.0` before such flags
    were refused for them: their models had nothing those settings touch, and build without them."""
    config = json.loads((ROOT / "lab/results/reviewer/learned-s0/config.json").read_text())
    assert config["grid_start"] and config["min_alpha"] == 1.0
    assert model_lib.count_parameters(model_lib.model_from_config(experiments.with_defaults(config))) == 127_562  # RESULTS 7.1
    config = json.loads((ROOT / "lab/results/reviewer/gaussian-s0/config.json").read_text())
    assert model_lib.model_from_config(experiments.with_defaults(config)).attention_layers[0].encoding.centers.shape == (9, 2)
    with pytest.raises(ValueError, match="grid_start moves head centers"):  # a new command is still refused
        model_lib.build_model("learned", grid_start=True)


def notebook_compare_commands() -> list:
    """The arguments of every `python -m lab.compare` that lab/RESULTS.md writes, its globs expanded as
    a shell expands them; a loop `for r in RUNS; do python -m lab.compare $r ...; done`: one a run."""
    text = notebook()
    lines = {piece.strip() for block, span in re.findall(r"```[a-z]*\n(.*?)```|`([^`]+)`", text, re.S)
             for piece in (block.splitlines() if block else [span.replace("\n", " ")])
             if "python -m lab.compare" in piece}
    expand = lambda words: [p for w in shlex.split(words) for p in (sorted(glob.glob(w, root_dir=ROOT)) or [w])]
    found = []
    for line in sorted(lines):
        loop = re.fullmatch(r"for (\w+) in (.*?); do (.*?); done", line)
        bodies = [loop[3].replace("$" + loop[1], w) for w in expand(loop[2])] if loop else [line]
        found += [expand(body.split("python -m lab.compare")[1].split("|")[0]) for body in bodies]
    return found


@pytest.mark.slow
def test_every_compare_command_in_the_notebook_runs_on_its_committed_runs(tmp_path, monkeypatch, capsys):
    """Each one exits 0 on the committed runs (an old run's settings are read, never refused); its
    figures go to tmp_path, not lab/figures. Minutes: the heads of every logged step are measured."""
    commands = notebook_compare_commands()
    assert len(commands) >= 30
    monkeypatch.chdir(ROOT)
    for i, argv in enumerate(commands):
        if "--out" in argv:
            argv[argv.index("--out") + 1] = str(tmp_path / str(i))
        monkeypatch.setattr(sys, "argv", ["compare.py"] + argv)
        try:
            compare.main()
        except SystemExit as e:
            pytest.fail(f"python -m lab.compare {' '.join(argv)}: {e}")
    assert "| encoding=learned |" in capsys.readouterr().out


def test_compare_expands_a_quoted_pattern_itself(tmp_path, monkeypatch):
    """PowerShell and cmd pass `lab/results/grid/laptop-s*` on as typed: compare.py expands it, sorted,
    and a pattern that matches no run is one clear error."""
    for seed in (1, 0):
        write_run(tmp_path / f"a-s{seed}", seed, [0.5])
    monkeypatch.chdir(tmp_path)
    assert compare.run_paths(["a-s*", "a-s0"]) == ["a-s0", "a-s1", "a-s0"]  # a plain path stays as typed
    with pytest.raises(ValueError, match=r"no run matches 'b-s\*'"):
        compare.run_paths(["a-s0", "b-s*"])
