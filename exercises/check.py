"""Checks a day of the week's exercises: PASS or FAIL for every item, with the value the library's
function gives, the reference it is held to and the tolerance.

    python -m exercises.check 1                    # day 1's functions, where they live (attention.py, prove.py)
    python -m exercises.check 3 --run runs/day3    # day 3 also reads your training run

Run it from the project's root. Each day's items live in exercises/dayN_check.py, with WRITE: the
functions the day writes, by file. Every reference there is computed apart from those functions:
in float64 from the equations, by `F.conv2d`, from the paper's tables, or as a band over committed
runs. Passing is evidence, not proof: a check tests the cases it names.

A function not yet written (its body still `raise NotImplementedError("day N: ...")`) FAILs as
"not written"; a stretch goal's items say SKIP until written, and a SKIP never fails the day.
An exception in the library is your bug: FAIL. An exception in the check's own code is the check's
bug: ERROR, which fails the day too and asks for a report.
"""
import argparse
import importlib
import math
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

DAYS = {1: "day1_theorem", 2: "day2_network", 3: "day3_training", 4: "day4_pruning", 5: "day5_open"}
EXERCISES = Path(__file__).resolve().parent


@dataclass
class Item:
    """One checked claim: `measure()` should lie within `tol` of `reference` ("within"),
    at least / at most `reference` ("at least", "at most"), or in the band [reference, high]
    ("in band")."""
    name: str
    measure: Callable  # () -> a number, computed by the library's functions
    reference: float
    tol: float = 0.0
    hint: str = ""
    test: str = "within"
    high: float = math.inf
    stretch: bool = False  # a stretch goal's item: SKIP while its function is unwritten

    def passes(self, value: float) -> bool:
        if not math.isfinite(value):
            return False
        if self.test == "at least":
            return value >= self.reference - self.tol
        if self.test == "at most":
            return value <= self.reference + self.tol
        if self.test == "in band":
            return self.reference - self.tol <= value <= self.high + self.tol
        return abs(value - self.reference) <= self.tol

    def rule(self) -> str:
        if self.test == "within":
            return f"reference {self.reference:.6g}, tolerance {self.tol:.1g}"
        if self.test == "in band":
            return f"band {self.reference:.6g} to {self.high:.6g}, widened by {self.tol:.1g}"
        return f"{self.test} {self.reference:.6g}" + (f" (tolerance {self.tol:.1g})" if self.tol else "")


class Missing(Exception):
    """What an item reads from you is not there yet (day 3's training run): a FAIL that says what to do."""


def raised_by_check(error: BaseException) -> bool:
    """Whether an exception was raised in a check's own code, not in the library: the last frame
    of this project's files is under exercises/."""
    frames = [f.filename for f in traceback.extract_tb(error.__traceback__)]
    ours = [f for f in frames if Path(f).resolve().is_relative_to(EXERCISES.parent)]
    return bool(ours) and Path(ours[-1]).resolve().is_relative_to(EXERCISES)


def evaluate(item: Item) -> tuple:
    """(status, the line to print) for one item: PASS, FAIL, SKIP (an unwritten stretch goal) or
    ERROR (the check's own code failed)."""
    try:
        value = float(item.measure())
    except NotImplementedError as e:  # the hint waits for a first try: it would give the answer away
        if str(e).startswith("day ") and item.stretch:
            return "SKIP", f"SKIP  {item.name}: a stretch goal, not written (optional)"
        if str(e).startswith("day "):
            return "FAIL", f"FAIL  {item.name}: not written yet ({e})"
        return "FAIL", f"FAIL  {item.name}: NotImplementedError: {e}\n      hint: {item.hint}"
    except Missing as e:
        return "FAIL", f"FAIL  {item.name}: {e}"
    except Exception as e:
        if raised_by_check(e):
            return "ERROR", (f"ERROR {item.name}: the check itself failed ({type(e).__name__}: {e}); "
                             "this is not your mistake: please report it")
        return "FAIL", f"FAIL  {item.name}: {type(e).__name__}: {e}\n      hint: {item.hint}"
    if item.passes(value):
        return "PASS", f"PASS  {item.name}: {value:.6g} ({item.rule()})"
    return "FAIL", f"FAIL  {item.name}: {value:.6g} ({item.rule()})\n      hint: {item.hint}"


def day_checks(day: int):
    """The module exercises/dayN_check.py: its `items(run)`, `WRITE` and `STRETCH` (the functions
    the day writes and its stretch goals', {file: qualified names}). Its plausible mistakes are the
    instructors' (exercises/answers/mistakes.py), planted in a copy by exercises/test_exercises.py."""
    return importlib.import_module(f"exercises.day{day}_check")


def check(day: int, run: str = "") -> list:
    """Every item of `day` against the library as it stands: [(status, line), ...]."""
    return [evaluate(item) for item in day_checks(day).items(run)]


def verdict(statuses: list) -> str:
    """The day's summary line's counts: the items that pass, and the stretch goals' skipped items."""
    count = {s: statuses.count(s) for s in ("PASS", "FAIL", "SKIP", "ERROR")}
    line = f"{count['PASS']} of {len(statuses) - count['SKIP']} items pass"
    line += f"; {count['ERROR']} checks failed themselves (please report)" if count["ERROR"] else ""
    return line + (f"; {count['SKIP']} stretch items skipped (optional)" if count["SKIP"] else "")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)
    parser.add_argument("day", type=int, choices=sorted(DAYS), help="which day's exercises")
    parser.add_argument("--run", default="", help="your training run's folder (day 3)")
    args = parser.parse_args(argv)
    try:
        results = check(args.day, args.run)
    except SyntaxError as e:  # a library file mid-edit: say where, and fail the day
        print(f"FAIL  {Path(e.filename or '?').name} does not parse, line {e.lineno}: {e.msg}")
        return 1
    for _, line in results:
        print(line)
    statuses = [status for status, _ in results]
    print(f"day {args.day}: {verdict(statuses)}")
    return 1 if {"FAIL", "ERROR"} & set(statuses) else 0


if __name__ == "__main__":
    from exercises import check  # the module, not this __main__ copy of it: the day checks raise its Missing
    sys.exit(check.main())
