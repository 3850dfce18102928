"""The students' copy: the project with each day's functions emptied where they live, and no answer.

    python -m exercises.students_copy DEST       # from the project's root; DEST must not exist yet
    python -m exercises.students_copy DEST --days 1 3   # only days 1 and 3 left to write (the others done)
    cd DEST && python -m exercises.check 1       # every item FAILs as "not written"
    cd DEST && python -m pytest -q               # passes: a test that reaches an unwritten function is skipped

Each day's functions (WRITE and STRETCH in exercises/dayN_check.py, by file) keep their name,
signature and docstring. Their body becomes `raise NotImplementedError("day N: exercises/dayN_....md")`,
so `python prove.py` and `python train.py` run the student's code once it is written.
The copy leaves out the answers (exercises/answers/, with the instructors' page and the planted mistakes,
lab/RESULTS.md, and lab/test_planted.py, whose bugs quote the solution),
version control, caches, `runs/` and `data/`. The committed runs under lab/results/ stay: they are data.

`scratch_copy` and `plant` serve the tests: a copy with one mistake planted in the library.
"""
import argparse
import ast
import re
import shutil
import sys
from pathlib import Path

from exercises.check import DAYS, day_checks

ROOT = Path(__file__).resolve().parent.parent
LEFT_OUT_ANYWHERE = {".git", "__pycache__", ".pytest_cache", ".benchmarks", ".whl"}
LEFT_OUT_AT_ROOT = {"runs", "data"}
ANSWERS = ("exercises/answers", "lab/RESULTS.md", "lab/test_planted.py")  # what only an instructor reads: answers, solutions' text


def holes(day: int) -> dict:
    """{file: (qualified names)} of the day's functions, its stretch goals included."""
    checks = day_checks(day)
    found = {}
    for part in (checks.WRITE, checks.STRETCH):
        for file, names in part.items():
            found[file] = found.get(file, ()) + tuple(names)
    return found


def unwritten_message(day: int) -> str:
    return f"day {day}: exercises/{DAYS[day]}.md"


def functions(tree: ast.Module) -> dict:
    """{qualified name: def node} of a module's functions and its classes' methods."""
    found = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            found[node.name] = node
        if isinstance(node, ast.ClassDef):
            found |= {f"{node.name}.{f.name}": f for f in node.body if isinstance(f, ast.FunctionDef)}
    return found


def empty(source: str, names, message: str) -> str:
    """`source` with each named function's body, below its docstring, one `raise NotImplementedError(message)`."""
    lines = source.splitlines(keepends=True)
    found = functions(ast.parse(source))
    missing = [n for n in names if n not in found]
    if missing:
        raise ValueError(f"no function {', '.join(missing)} to empty")
    for node in sorted((found[n] for n in names), key=lambda f: f.lineno, reverse=True):
        body = node.body
        first = body[1] if ast.get_docstring(node) is not None else body[0]
        indent = " " * first.col_offset
        lines[first.lineno - 1:node.end_lineno] = [f'{indent}raise NotImplementedError("{message}")\n']
    return "".join(lines)


def empty_day(node: ast.FunctionDef):
    """The day N of a function whose body is a docstring and one `raise NotImplementedError("day N: ...")`, else None."""
    body = node.body[1:] if ast.get_docstring(node) is not None else node.body
    if len(body) == 1 and isinstance(body[0], ast.Raise) and isinstance(body[0].exc, ast.Call) \
            and getattr(body[0].exc.func, "id", "") == "NotImplementedError":
        found = re.match(r"day (\d):", str(getattr(next(iter(body[0].exc.args), None), "value", "")))
        return found and int(found.group(1))
    return None


def unwritten(root: Path = ROOT) -> list:
    """The week's functions still empty in the tree at `root`: [(day, file, name)]. Read from the
    library's files, not from the checks, so a file that does not parse yet only leaves out its own."""
    found = []
    for path in sorted(Path(root).glob("*.py")) + sorted(Path(root).glob("lab/*.py")):
        try:
            defs = functions(ast.parse(path.read_text()))
        except SyntaxError:
            continue
        found += [(empty_day(node), path.relative_to(root).as_posix(), name) for name, node in defs.items()
                  if empty_day(node)]
    return sorted(found)


def copy_tree(dest: Path, root: Path = ROOT, answers: bool = False) -> int:
    """Copy the project at `root` to `dest` (which must not exist); returns the files copied.
    Without `answers`, the instructors' files stay behind."""
    root = Path(root).resolve()
    answer_paths = set() if answers else {root / a for a in ANSWERS}

    def left_out(folder: str, names: list) -> set:  # shutil.copytree's ignore
        here = Path(folder).resolve()
        out = {n for n in names if n in LEFT_OUT_ANYWHERE or n.endswith(".tmp") or here / n in answer_paths}
        return out | ({n for n in names if n in LEFT_OUT_AT_ROOT} if here == root else set())

    shutil.copytree(root, dest, ignore=left_out, symlinks=True)
    return sum(1 for p in Path(dest).rglob("*") if p.is_file())


def students_copy(dest: Path, root: Path = ROOT, days=DAYS) -> int:
    """The project without its answers, the functions of `days` (every day's) emptied; returns the files copied."""
    files = copy_tree(dest, root)
    for day in days:
        for file, names in holes(day).items():
            path = Path(dest) / file
            path.write_text(empty(path.read_text(), names, unwritten_message(day)))
    return files


def scratch_copy(dest: Path, root: Path = ROOT) -> Path:
    """A copy of the project to plant mistakes in: everything the tests read, the answers too;
    `data/` is linked, not copied."""
    copy_tree(dest, root, answers=True)
    if (root / "data").exists():
        (Path(dest) / "data").symlink_to((root / "data").resolve())
    return Path(dest)


def plant(root: Path, file: str, old: str, new: str):
    """Replace the one occurrence of `old` in root/file by `new` (a planted mistake). A ValueError
    when `old` is not there exactly once: the library changed, or its function is unwritten."""
    path = Path(root) / file
    text = path.read_text()
    if text.count(old) != 1:
        raise ValueError(f"{file} holds {text.count(old)} copies of {old!r}, not one")
    path.write_text(text.replace(old, new))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)
    parser.add_argument("dest", help="the folder to create, outside this project")
    parser.add_argument("--days", type=int, nargs="+", choices=sorted(DAYS), default=sorted(DAYS),
                        help="the days whose functions the copy empties (default: all five)")
    args = parser.parse_args(argv)
    dest = Path(args.dest).resolve()
    if dest.exists():
        print(f"{dest} exists: give a folder that does not exist yet")
        return 1
    if dest.is_relative_to(ROOT):
        print(f"{dest} is inside the project: give a folder outside {ROOT}")
        return 1
    files = students_copy(dest, days=args.days)
    print(f"wrote {dest}: {files} files, the functions of days {', '.join(map(str, args.days))} emptied, "
          "without the answers, runs/ and data/")
    print(f"check it: cd {dest} && python -m exercises.check 1")
    return 0


if __name__ == "__main__":
    sys.exit(main())
