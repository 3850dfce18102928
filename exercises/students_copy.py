"""The students' copy of the project: everything a course hands out, without exercises/solutions/.

    python -m exercises.students_copy DEST       # from the project's root; DEST must not exist yet
    cd DEST && python -m pytest -q exercises     # the week's suite passes there, skipping what needs the solutions

It copies the project's files as they are in this folder, leaving out exercises/solutions/,
version control (.git), caches, `runs/` and `data/` (train.py downloads CIFAR-10 into `data/`).
It refuses when a stub in exercises/dayN_*.py is already written: a students' copy starts from
the untouched stubs.
"""
import argparse
import ast
import shutil
import sys
from pathlib import Path

from exercises.check import DAYS, day_checks

ROOT = Path(__file__).resolve().parent.parent
LEFT_OUT_ANYWHERE = {".git", "__pycache__", ".pytest_cache", ".benchmarks", ".whl"}
LEFT_OUT_AT_ROOT = {"runs", "data"}


def is_docstring(statement: ast.stmt) -> bool:
    return isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)


def written_stubs(root: Path = ROOT) -> list:
    """The functions of exercises/dayN_*.py whose body is more than a docstring and `raise NotImplementedError`."""
    written = []
    for day, name in DAYS.items():
        checks = day_checks(day)
        path = root / "exercises" / f"{name}.py"
        tree = ast.parse(path.read_text())
        bodies = {node.name: node.body for node in tree.body if isinstance(node, ast.FunctionDef)}
        for function in (*checks.WRITE, *checks.STRETCH):
            body = [s for s in bodies.get(function, []) if not is_docstring(s)]
            untouched = (len(body) == 1 and isinstance(body[0], ast.Raise)
                         and "NotImplementedError" in ast.unparse(body[0]))
            if not untouched:
                written.append(f"exercises/{name}.py: {function}")
    return written


def copy_tree(root: Path, dest: Path) -> int:
    """Copy the project at `root` to `dest` (which must not exist) without the solutions; returns the files copied."""
    root = Path(root).resolve()

    def left_out(folder: str, names: list) -> set:  # shutil.copytree's ignore: what a students' copy does not hold
        here = Path(folder).resolve()
        out = {n for n in names if n in LEFT_OUT_ANYWHERE or n.endswith(".tmp")}
        if here == root:
            out |= {n for n in names if n in LEFT_OUT_AT_ROOT}
        if here == root / "exercises":
            out.add("solutions")
        return out

    shutil.copytree(root, dest, ignore=left_out, symlinks=True)
    return sum(1 for p in Path(dest).rglob("*") if p.is_file())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)
    parser.add_argument("dest", help="the folder to create, outside this project")
    args = parser.parse_args(argv)
    dest = Path(args.dest).resolve()
    if dest.exists():
        print(f"{dest} exists: give a folder that does not exist yet")
        return 1
    if dest.is_relative_to(ROOT):
        print(f"{dest} is inside the project: give a folder outside {ROOT}")
        return 1
    written = written_stubs()
    if written:
        print("these stubs are written, so the copy would hand out answers: " + ", ".join(written))
        print("restore the untouched stubs first (for instance from a fresh clone)")
        return 1
    files = copy_tree(ROOT, dest)
    print(f"wrote {dest}: {files} files, without exercises/solutions/, runs/ and data/")
    print(f"check it: cd {dest} && python -m pytest -q exercises")
    return 0


if __name__ == "__main__":
    sys.exit(main())
