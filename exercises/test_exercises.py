"""The week's checks, checked: every item of every day fails on the untouched stubs and passes on
the reference solutions. `python -m pytest -q exercises` (or `python -m pytest -q`, every suite)."""
import json
from pathlib import Path

import pytest

from exercises.check import DAYS, check

# Day 3's run items read a training run: the committed fp32 run of day 3's command, seed 0.
RUN = Path(__file__).parent.parent / "lab/results/course/train-fp32-s0"


def run_for(day: int) -> str:
    if day != 3:
        return ""
    if not (RUN / "checkpoint.pt").exists():
        pytest.skip(f"{RUN} is not in this copy")
    return str(RUN)


@pytest.mark.parametrize("day", sorted(DAYS))
def test_every_item_fails_on_the_stubs(day):
    results = check(day, run=run_for(day))
    assert results and not [line for ok, line in results if ok]


@pytest.mark.parametrize("day", sorted(DAYS))
def test_every_item_passes_on_the_solutions(day):
    results = check(day, solutions=True, run=run_for(day))
    assert results and all(ok for ok, _ in results), "\n".join(line for ok, line in results if not ok)


def test_day3s_bands_are_those_of_the_committed_runs():
    from exercises.day3_check import BANDS
    runs = sorted(RUN.parent.glob("train-*-s*"))
    if not runs:
        pytest.skip("day 3's committed runs are not in this copy")
    assert sorted(run.name for run in runs) == [f"train-{p}-s{s}" for p in ("bf16", "fp32") for s in range(5)]
    ends = [json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])["layers"] for run in runs]
    for (measure, layer), band in BANDS.items():
        values = [end[layer - 1][measure] for end in ends]
        assert band == (min(values), max(values)), (measure, layer, values)
