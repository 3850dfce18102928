"""Checks a day of the week's exercises: PASS or FAIL for every item, with the value your code
gives, the reference it is held to and the tolerance.

    python -m exercises.check 1                    # your functions in exercises/day1_theorem.py
    python -m exercises.check 3 --run runs/day3    # day 3 also reads your training run
    python -m exercises.check 1 --solutions        # the reference solutions (exercises/solutions/)

Run it from the project's root. Each day's items live in exercises/dayN_check.py: every
reference there is computed apart from your code (float64, `F.conv2d`, the paper's tables,
the project's own layer) or is a band measured over committed runs. Passing is evidence, not
proof: a check tests the cases it names.
"""
import argparse
import importlib
import math
import sys
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
    """(passed, the line to print) for one item; an exception in your code is a FAIL, said in one line."""
    try:
        value = float(item.measure(yours))
    except NotImplementedError:
        return False, f"FAIL  {item.name}: not written yet (NotImplementedError)\n      hint: {item.hint}"
    except Exception as e:  # a student's bug: name it and go on to the next item
        return False, f"FAIL  {item.name}: {type(e).__name__}: {e}\n      hint: {item.hint}"
    if item.passes(value):
        return True, f"PASS  {item.name}: {value:.6g} ({item.rule()})"
    return False, f"FAIL  {item.name}: {value:.6g} ({item.rule()})\n      hint: {item.hint}"


def check(day: int, solutions: bool = False, run: str = "") -> list:
    """Every item of `day` against your module (or the solutions'): [(passed, line), ...]."""
    module = ("exercises.solutions." if solutions else "exercises.") + DAYS[day]
    yours = importlib.import_module(module)
    items = importlib.import_module(f"exercises.day{day}_check").items(run)
    return [evaluate(item, yours) for item in items]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)
    parser.add_argument("day", type=int, choices=sorted(DAYS), help="which day's exercises")
    parser.add_argument("--solutions", action="store_true", help="check the reference solutions instead of yours")
    parser.add_argument("--run", default="", help="your training run's folder (day 3)")
    args = parser.parse_args(argv)
    results = check(args.day, args.solutions, args.run)
    for _, line in results:
        print(line)
    passed = sum(ok for ok, _ in results)
    print(f"day {args.day}: {passed} of {len(results)} items pass")
    return 0 if passed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
