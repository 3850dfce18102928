"""Checks a day of the week's exercises: PASS or FAIL for every item, with the value your code
gives, the reference it is held to and the tolerance.

    python -m exercises.check 1                    # your functions in exercises/day1_theorem.py
    python -m exercises.check 3 --run runs/day3    # day 3 also reads your training run
    python -m exercises.check 1 --solutions        # the reference solutions (exercises/solutions/)

Run it from the project's root. Each day's items live in exercises/dayN_check.py. Every
reference there is computed apart from your code: in float64, by `F.conv2d`, from the paper's
tables, by the project's own layer, or as a band over committed runs. Passing is evidence, not
proof: a check tests the cases it names.

A stretch goal is optional. Its items say SKIP until you write its function, and a SKIP never
fails the day. Once written, a stretch item passes or fails like any other.
"""
import argparse
import importlib
import importlib.util
import math
import sys
import types
from dataclasses import dataclass
from typing import Callable

DAYS = {1: "day1_theorem", 2: "day2_network", 3: "day3_training", 4: "day4_pruning", 5: "day5_open"}


@dataclass
class Item:
    """One checked claim: `measure(yours)` should lie within `tol` of `reference` ("within"),
    at least / at most `reference` ("at least", "at most"), or in the band [reference, high]
    ("in band")."""
    name: str
    measure: Callable  # the module of your functions -> a number
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


def evaluate(item: Item, yours) -> tuple:
    """(status, the line to print) for one item: status PASS, FAIL or SKIP (an unwritten stretch goal).
    An exception in your code is a FAIL, said in one line."""
    try:
        value = float(item.measure(yours))
    except NotImplementedError:
        if item.stretch:
            return "SKIP", f"SKIP  {item.name}: a stretch goal, not written (optional)"
        return "FAIL", f"FAIL  {item.name}: not written yet (NotImplementedError)\n      hint: {item.hint}"
    except Exception as e:  # a student's bug: name it and go on to the next item
        return "FAIL", f"FAIL  {item.name}: {type(e).__name__}: {e}\n      hint: {item.hint}"
    if item.passes(value):
        return "PASS", f"PASS  {item.name}: {value:.6g} ({item.rule()})"
    return "FAIL", f"FAIL  {item.name}: {value:.6g} ({item.rule()})\n      hint: {item.hint}"


def day_checks(day: int):
    """The module exercises/dayN_check.py: its `items(run)`, `WRITE` (the functions a student
    writes) and `STRETCH` (the stretch goals' functions)."""
    return importlib.import_module(f"exercises.day{day}_check")


def unwritten(day: int) -> types.SimpleNamespace:
    """The day's stubs as they ship: every function of WRITE and STRETCH raises NotImplementedError.
    Built here, not read from exercises/dayN_*.py, which a student edits."""
    def stub(name):
        def raises(*args, **kwargs):
            raise NotImplementedError(name)
        return raises
    checks = day_checks(day)
    return types.SimpleNamespace(**{name: stub(name) for name in (*checks.WRITE, *checks.STRETCH)})


def check(day: int, solutions: bool = False, run: str = "", yours=None) -> list:
    """Every item of `day` against your module, the solutions' (`solutions`) or any module
    given as `yours`: [(status, line), ...], status PASS, FAIL or SKIP."""
    if yours is None:
        yours = importlib.import_module(("exercises.solutions." if solutions else "exercises.") + DAYS[day])
    return [evaluate(item, yours) for item in day_checks(day).items(run)]


def verdict(statuses: list) -> str:
    """The day's summary line's counts: the items that pass, and the stretch goals' skipped items."""
    count = {s: statuses.count(s) for s in ("PASS", "FAIL", "SKIP")}
    line = f"{count['PASS']} of {len(statuses) - count['SKIP']} items pass"
    return line + (f"; {count['SKIP']} stretch items skipped (optional)" if count["SKIP"] else "")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)
    parser.add_argument("day", type=int, choices=sorted(DAYS), help="which day's exercises")
    parser.add_argument("--solutions", action="store_true", help="check the reference solutions instead of yours")
    parser.add_argument("--run", default="", help="your training run's folder (day 3)")
    args = parser.parse_args(argv)
    if args.solutions and importlib.util.find_spec("exercises.solutions") is None:
        print("exercises/solutions/ is not in this copy: a students' copy has no solutions")
        return 2
    results = check(args.day, args.solutions, args.run)
    for _, line in results:
        print(line)
    statuses = [status for status, _ in results]
    print(f"day {args.day}: {verdict(statuses)}")
    return 1 if "FAIL" in statuses else 0


if __name__ == "__main__":
    sys.exit(main())
