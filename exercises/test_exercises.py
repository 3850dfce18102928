"""The week's checks, checked. The student writes the library's own functions, where they live;
a students' copy (`python -m exercises.students_copy DEST`) empties them and holds no answer.

- In the project, which is the solution, every item of every day passes, and no test of the suite
  is skipped as unwritten.
- In a students' copy every required item FAILs as "not written" and every stretch item SKIPs;
  with day 1 written, day 1 passes and the tests that reach day 2's functions are skipped.
- Each check catches the plausible mistakes of its day (exercises/answers/mistakes.py), planted in a copy
  of the library.
- A check's own crash is an ERROR, never the student's FAIL.
- The copy holds no answer's number; no handout names a file the copy lacks, or the answers.
What needs the project's own functions (written as the project writes them) skips in a students' copy.
"""
import ast
import glob
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import attention
from exercises.check import DAYS, Item, check, day_checks, evaluate
from exercises.students_copy import ANSWERS, functions, holes, plant, scratch_copy, students_copy, unwritten

HERE = Path(__file__).parent
ROOT = HERE.parent
IN_PROJECT = (ROOT / "exercises/answers").is_dir()  # a students' copy has no answers
# Day 3's run items read a training run: the committed fp32 run of day 3's command, seed 0.
RUN = ROOT / "lab/results/course/train-fp32-s0"


def run_for(day: int) -> str:
    return str(RUN) if day == 3 and (RUN / "checkpoint.pt").exists() else ""


def needs_written(day: int):
    """Skip when the day's functions are not written in this tree (a students' copy)."""
    left = [f"{file}: {name}" for d, file, name in unwritten(ROOT) if d == day]
    if left:
        pytest.skip(f"not written yet: day {day}: {', '.join(left)}")


def check_in(root: Path, day: int, *args) -> subprocess.CompletedProcess:
    """`python -m exercises.check DAY` run in another tree: its library, its checks."""
    return subprocess.run([sys.executable, "-m", "exercises.check", str(day), *args], cwd=root, capture_output=True,
                          text=True, timeout=300)


def statuses(output: str) -> list:
    return re.findall(r"^(PASS|FAIL|SKIP|ERROR) ", output, flags=re.M)


@pytest.mark.parametrize("day", sorted(DAYS))
def test_every_item_passes_on_the_library(day):
    needs_written(day)
    results = check(day, run=run_for(day))
    assert results and all(status == "PASS" for status, _ in results), \
        "\n".join(line for status, line in results if status != "PASS")


def test_the_project_has_every_function_written():
    """No test of the project's suite is skipped as unwritten: the plugin finds nothing to skip."""
    if not IN_PROJECT:
        pytest.skip("a students' copy: its functions are the student's to write")
    assert unwritten(ROOT) == []


@pytest.fixture(scope="module")
def copy(tmp_path_factory) -> Path:
    if not IN_PROJECT:
        pytest.skip("a students' copy makes no copy of itself")
    dest = Path(tmp_path_factory.mktemp("course")) / "copy"
    students_copy(dest)
    return dest


@pytest.mark.parametrize("day", sorted(DAYS))
def test_a_students_copy_fails_every_item_as_not_written(copy, day):
    result = check_in(copy, day, *(["--run", str(RUN)] if run_for(day) else []))
    found = statuses(result.stdout)
    items = day_checks(day).items(run_for(day))
    assert result.returncode == 1 and len(found) == len(items), result.stdout + result.stderr
    for item, status, line in zip(items, found, re.findall(r"^(?:PASS|FAIL|SKIP|ERROR) .*", result.stdout, re.M)):
        expected = "SKIP" if item.stretch else "FAIL"
        assert status == expected and ("not written" in line or item.stretch), line


def test_a_students_copy_holds_the_functions_empty_and_no_answer(copy):
    assert not (copy / ".git").exists() and all(not (copy / a).exists() for a in ANSWERS)
    assert {(d, f, n) for d, f, n in unwritten(copy)} == {(d, f, n) for d in DAYS for f, names in holes(d).items()
                                                        for n in names}
    body = (copy / "attention.py").read_text()
    assert 'raise NotImplementedError("day 1: exercises/day1_theorem.md")' in body
    assert "sqrt_2alpha**2 / 2" in body  # what no day writes is still there


def answer_numbers() -> set:
    """The numbers the answers give that no other file of the project states: intervals, signed
    differences, p-values and four-digit accuracies."""
    found = set()
    for page in (ROOT / "exercises/answers").glob("*.md"):
        text = page.read_text()
        found |= set(re.findall(r"\[[-+]?\d+\.\d+, [-+]?\d+\.\d+\]", text))  # an interval [low, high]
        found |= set(re.findall(r"(?<![\w.])[-+]\d+\.\d{3,}(?!\d)", text))  # a signed difference
        found |= {f"p = {p}" for p in re.findall(r"p = (\d\.\d+)", text) if p != "0.05"}  # 0.05: a convention
        found |= set(re.findall(r"(?<![\w.])0\.\d{4}(?!\d)", text))  # an accuracy to four decimals
    return found


def test_no_answer_is_found_in_a_students_copy(copy):
    numbers = answer_numbers()
    assert len(numbers) > 20  # the answers hold numbers to look for
    found = []
    for path in copy.rglob("*"):
        if path.suffix in (".md", ".py", ".txt", ".sh", ".ini") and "lab/results" not in path.as_posix():
            text = path.read_text()
            found += [f"{path.relative_to(copy)}: {n}" for n in numbers if n in text]
    assert not found, found


def solution_lines() -> dict:
    """{line: where}: each line of code, 25 characters or more, of the week's functions in the project."""
    found = {}
    for day in DAYS:
        for file, names in holes(day).items():
            source = (ROOT / file).read_text()
            defs = functions(ast.parse(source))
            for name in names:
                body = defs[name].body[1:] if ast.get_docstring(defs[name]) is not None else defs[name].body
                for line in source.splitlines()[body[0].lineno - 1:defs[name].end_lineno]:
                    code = line.split("  #")[0].strip()
                    found |= {code: f"{file}: {name}"} if len(code) >= 25 and not code.startswith("#") else {}
    return found


def test_no_line_of_the_solutions_is_found_in_a_students_copy(copy):
    """Outside the library's other functions (which may share a line of boilerplate), the copy holds none."""
    library = "\n".join(p.read_text() for p in [*copy.glob("*.py"), *copy.glob("lab/*.py")])
    lines = {line: where for line, where in solution_lines().items() if line not in library}
    assert len(lines) > 40
    found = [f"{path.relative_to(copy)}: {line} ({where})" for path in copy.rglob("*")
             if path.suffix in (".md", ".py") and "lab/results" not in path.as_posix()
             for line, where in lines.items() if line in path.read_text()]
    assert not found, found


def test_a_copy_with_day_1_written_passes_day_1_and_skips_what_day_2_writes(tmp_path):
    if not IN_PROJECT:
        pytest.skip("a students' copy makes no copy of itself")
    students_copy(tmp_path / "half", days=[2, 3, 4, 5])
    one, two = check_in(tmp_path / "half", 1), check_in(tmp_path / "half", 2)
    assert one.returncode == 0 and set(statuses(one.stdout)) == {"PASS"}, one.stdout
    assert two.returncode == 1 and "not written yet (day 2: exercises/day2_network.md)" in two.stdout
    tests = ["test_all.py::test_theorem_error_falls_like_exp_minus_alpha", "test_all.py::test_space_to_depth_is_a_permutation"]
    suite = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *tests],
                           cwd=tmp_path / "half", capture_output=True, text=True, timeout=300)
    assert suite.returncode == 0 and "1 passed, 1 skipped" in suite.stdout, suite.stdout + suite.stderr
    assert "not written yet: day 2: exercises/day2_network.md" in suite.stdout


def test_a_checks_own_crash_is_an_error_and_a_crash_in_the_library_a_fail():
    def broken_reference():
        return [][0]  # the check's own code fails here

    def library_fails():
        return attention.check_grid(None)  # attention.py raises: the student's code, as the check sees it

    assert evaluate(Item("check", broken_reference, 0.0))[0] == "ERROR"
    assert evaluate(Item("library", library_fails, 0.0))[0] == "FAIL"
    assert evaluate(Item("unwritten", lambda: (_ for _ in ()).throw(NotImplementedError("day 1: x.md")), 0.0))[0] \
        == "FAIL"


def test_a_library_file_that_does_not_parse_fails_the_day_in_one_line(tmp_path):
    if not IN_PROJECT:
        pytest.skip("a students' copy makes no copy of itself")
    root = scratch_copy(tmp_path / "copy")
    plant(root, "prove.py", "def kernel_heads(", "def kernel_heads(:")
    result = check_in(root, 1)
    assert result.returncode == 1 and result.stdout.startswith("FAIL  prove.py does not parse"), result.stdout


try:  # the instructors' file: their text is the solution's, so a students' copy leaves it out
    from exercises.answers.mistakes import MISTAKES
except ImportError:
    MISTAKES = {}
PLANTED = [(day, name) for day, names in sorted(MISTAKES.items()) for name in names]


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    if not IN_PROJECT:
        pytest.skip("a students' copy: the mistakes are planted in the project's own functions")
    return scratch_copy(Path(tmp_path_factory.mktemp("mistakes")) / "copy")


@pytest.mark.slow
@pytest.mark.parametrize("day, mistake", PLANTED, ids=[f"day{d}: {m}" for d, m in PLANTED])
def test_each_check_catches_a_plausible_mistake_planted_in_the_library(scratch, day, mistake):
    file, old, new = MISTAKES[day][mistake]
    original = (scratch / file).read_text()
    plant(scratch, file, old, new)
    try:
        result = check_in(scratch, day, *(["--run", str(RUN)] if run_for(day) else []))
    finally:
        (scratch / file).write_text(original)
    assert result.returncode == 1 and "FAIL" in statuses(result.stdout), result.stdout + result.stderr
    assert "ERROR" not in statuses(result.stdout), result.stdout


def test_day3s_bands_are_those_of_the_committed_runs():
    from exercises.day3_check import BANDS
    runs = sorted(RUN.parent.glob("train-*-s*"))
    if not runs:
        pytest.skip("day 3's committed runs are not in this copy")
    assert sorted(run.name for run in runs) == sorted(f"train-{p}-s{s}" for p in ("bf16", "fp32") for s in range(10))
    ends = [json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])["layers"] for run in runs]
    for (measure, layer), band in BANDS.items():
        values = [end[layer - 1][measure] for end in ends]
        assert band == (min(values), max(values)), (measure, layer, values)


# The files a run folder holds, named bare in the handouts ("its steps.jsonl").
RUN_FILES = {"config.json", "steps.jsonl", "heads.jsonl", "metrics.jsonl", "train.log", "checkpoint.pt",
             "measures.json", "prune.log", "bench.json", "bench.txt"}
PATHLIKE = re.compile(r"[A-Za-z0-9_.*{},/-]+")


def named_paths(text: str) -> set:
    """The repository paths a Markdown page names: in inline code, code blocks and link targets."""
    spans = re.findall(r"```.*?```|`[^`\n]+`", text, flags=re.S) + re.findall(r"\]\(([^)#\s]+)", text)
    found = set()
    for span in spans:
        for token in PATHLIKE.findall(span):
            token = token.strip(".,")
            top = token.split("/")[0]
            if "/" in token and top in {"lab", "exercises"} or re.fullmatch(r"[\w-]+\.(py|md|sh)", token):
                found.add(token)
    found |= {module.replace(".", "/") + ".py" for module in re.findall(r"python3? -m ([\w.]+)", text)
              if module.split(".")[0] in {"lab", "exercises"}}  # `python -m lab.compare`: lab/compare.py
    return found


def expand(pattern: str) -> list:
    """`a{0,1}b*` -> the patterns to glob: braces expanded."""
    match = re.search(r"\{([^{}]*)\}", pattern)
    if not match:
        return [pattern]
    return [p for part in match.group(1).split(",")
            for p in expand(pattern[:match.start()] + part + pattern[match.end():])]


def test_handouts_name_only_files_the_copy_holds_and_never_the_answers():
    """Every path in exercises/*.md exists in a students' copy; none is an answers' file."""
    missing = []
    for page in sorted(HERE.glob("*.md")):
        for path in named_paths(page.read_text()):
            if path in RUN_FILES:
                continue
            if any(path.startswith(a) for a in ANSWERS) or path.startswith("exercises/answers"):
                missing.append(f"{page.relative_to(ROOT)}: {path} (the answers)")
                continue
            if re.search(r"\{[^{},]*\}", path):  # a Python f-string's {name}: a template, not a path
                continue
            places = [ROOT, HERE, page.parent] if "/" not in path else [ROOT, page.parent]
            if not any(glob.glob(str(place / p)) for place in places for p in expand(path.replace("dayN", "day?"))):
                missing.append(f"{page.relative_to(ROOT)}: {path}")
    assert not missing, missing
