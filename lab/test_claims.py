"""Each number, verdict, count and time that README.md and lab/RESULTS.md's Findings state, against
lab/claims.py's recomputation from lab/results; each time of README.md and the handouts against its log.

    python -m pytest -q lab/test_claims.py

A line binds its words to a claim with `<!-- claim: NAME -->` after them; `<!-- claims: NAME -->` on the
line before a table binds its rows. What a test reads can be pointed elsewhere, to see it fail on an edited
copy: CLAIMS_README, CLAIMS_RESULTS (files), CLAIMS_EXERCISES (a folder).
"""
import functools
import os
import re
from pathlib import Path

import pytest

from lab import claims

ROOT = Path(__file__).resolve().parent.parent
README = Path(os.environ.get("CLAIMS_README", ROOT / "README.md"))
NOTEBOOK = Path(os.environ.get("CLAIMS_RESULTS", ROOT / "lab" / "RESULTS.md"))
EXERCISES = Path(os.environ.get("CLAIMS_EXERCISES", ROOT / "exercises"))
if not NOTEBOOK.exists():  # a students' copy leaves the notebook out: it answers the week's questions
    pytest.skip("lab/RESULTS.md is not in a students' copy", allow_module_level=True)

TAG = re.compile(r"<!--\s*claims?:\s*([\w, ]+?)\s*-->")
TIME = re.compile(r"(\d+) min (\d+) s\b|(\d+(?:\.\d+)?)-(\d+(?:\.\d+)?) (min|minutes|s)\b|(\d+(?:\.\d+)?) s\b|(\d+) (?:min|minutes)\b")
NOT_TIMES = ("sessions of about 90 minutes",)  # a plan for a lesson, not a measurement
NAMES = [  # words that carry digits but state no number: references, identifiers, kernel sizes
    r"`[^`]*`", r"<!--.*?-->", r"§[\d.\-]+", r"\b[Ll]ayers? \d+(?:(?: of|-|, | and) \d+)*", r"\b[Ss]eeds? \d+(?:-\d+)?",
    r"\b[Dd]ay \d+", r"\b\d+-layer\b", r"\]\([^)]*\)", r"\barXiv \S+", r"\bICLR \d+", r"\bPython \d[\d.+]*",
    r"\b(?:sections?|Figs?\.|Tables?|Theorem|Lemmas?|eqs?\.|§|RESULTS)\s*\d[\d.]*(?:\s*(?:,|-|–|and|to)\s*\d[\d.]*)*",
    r"\b[A-Za-z][\w]*(?:[-.]\w+)*", r"\b\d+x\d+\b", r"[\d.]+-dimensional"]
NUMBER = re.compile(r"(?<![\w.])([-+−]?)(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?(e[-+]?\d+)?(%|x\b|[MB]\b)?")
NEGATED = re.compile(r"not resolved|unresolved|no resolved|not resolve|do not resolve|does not resolve|"
                     r"no (?:\w+ ){0,4}(?:difference|effect)\b[^.]*resolved", re.I)
VERDICT = re.compile(r"\b(resolved|more|less|lowers?|lowered|higher|costs?|beats?|shrinks?|raises?|raised|rose|rises?|"
                     r"falls?|fell|better|worse|gains?|gained|improves?|sharper|exceeds?)\b", re.I)
EVERY = re.compile(r"\b(every|all|none|never|no run)\b", re.I)


def numbers(text: str) -> list:
    """The numbers a reader meets in `text`, as printed: times, names and references taken out."""
    text = TIME.sub(" ", text)
    for pattern in NAMES:
        text = re.sub(pattern, lambda m: "]" if m.group(0).startswith("](") else " ", text)
    found = []
    for m in NUMBER.finditer(text):
        sign = m.group(1).replace("−", "-").replace("+", "")
        if sign and m.start() > 0 and (text[m.start() - 1].isalnum() or text[m.start() - 1] == "."):
            sign = ""  # a range's dash, 0.625-0.633, not a minus
        found.append(sign + "".join(g or "" for g in m.groups()[1:]))
    return found


def plain(token: str) -> str:
    return token.lstrip("+")


def findings(text: str) -> str:
    return text.split("## Findings", 1)[1].split("\n## ", 1)[0]


@functools.lru_cache(maxsize=None)
def computed(name: str) -> claims.Claim:
    assert name in claims.claim_names(), f"no claim {name} in lab/claims.py"
    return getattr(claims, name)()


# ---- Reading the documents: each bound piece of text with its claims ---------------------------------

def pieces(path: Path, text: str) -> list:
    """(where, words, claim names, table rows' claim) for every piece of prose, table row and list item of
    `text`; a piece's words run from the previous tag to its own (the words after the last tag: no claim)."""
    found, lines, table_claim, in_code, header = [], text.split("\n"), None, False, False
    unit, start = [], 0

    def flush():
        if unit:
            joined = " ".join(unit)
            position = 0
            for m in TAG.finditer(joined):
                found.append((f"{path.name}:{start + 1}", joined[position:m.start()], m.group(1).replace(" ", "").split(","), None))
                position = m.end()
            found.append((f"{path.name}:{start + 1}", joined[position:], [], None))
        unit.clear()

    for i, line in enumerate(lines):
        if line.startswith("```"):
            flush()
            in_code = not in_code
            continue
        if in_code or line.startswith(("#", "![")):
            flush()
            continue
        whole = re.fullmatch(r"\s*<!--\s*claims:\s*(\w+)\s*-->\s*", line)
        if whole:
            flush()
            table_claim, header = whole.group(1), True
            continue
        if line.startswith("|"):
            flush()
            tags = [n for m in TAG.finditer(line) for n in m.group(1).replace(" ", "").split(",")]
            first = line.strip("|").split("|")[0].strip()
            found.append((f"{path.name}:{i + 1}", TAG.sub(" ", line), tags,
                          None if tags else (table_claim, None if header else first)))
            header = False
            continue
        table_claim = None if not line.strip() else table_claim
        if not line.strip() or re.match(r"\s*[-*] |\s*\d+\. ", line):
            flush()
            start = i
        if line.strip():
            if not unit:
                start = i
            unit.append(line.strip())
    flush()
    return found


def documents() -> list:
    return pieces(README, README.read_text()) + pieces(NOTEBOOK, findings(NOTEBOOK.read_text()))


PIECES = documents()


def test_every_number_verdict_and_count_names_the_claim_that_computes_it():
    unbound = [f"{where}: {words.strip()[:100]}" for where, words, names, row in PIECES
               if not names and (row is None or row[0] is None) and numbers(words)]
    assert not unbound, "numbers that no claim computes:\n" + "\n".join(unbound)


@pytest.mark.parametrize("where, words, names, row", [p for p in PIECES if p[2] or (p[3] and p[3][0])],
                         ids=lambda x: x if isinstance(x, str) and re.match(r"[\w.]+:\d+$", x) else "")
def test_each_bound_piece_agrees_with_its_recomputed_claim(where, words, names, row):
    found = [computed(n) for n in (names or [row[0]])]
    missing = [c.missing for c in found if c.missing]
    if missing:
        pytest.skip("; ".join(missing))
    if row:  # a table's row: its numbers against that row's
        rows = found[0].rows or {}
        key = row[1]
        printed = [plain(t) for t in numbers(words)]
        if isinstance(rows.get(key), claims.Claim):  # the row is a claim of its own
            if rows[key].missing:
                pytest.skip(rows[key].missing)
            found, names, row = [rows[key]], [f"{row[0]}[{key}]"], None
        elif key in rows:
            allowed = {plain(t) for t in rows[key]}
        else:  # the header: any of the table's numbers
            assert key is None or not printed, f"{where}: no row {key!r} in {row[0]}"
            allowed = {plain(t) for r in rows.values() for t in (r.numbers if isinstance(r, claims.Claim) else r)}
    if row:
        wrong = [t for t in printed if t not in allowed]
        assert not wrong, f"{where}: {wrong} are not {row[0]}'s numbers for this row, {sorted(allowed)}"
        return
    allowed = {plain(t) for c in found for t in c.numbers}
    wrong = [t for t in numbers(words) if plain(t) not in allowed]
    assert not wrong, f"{where}: {wrong} are not among {names}'s numbers {sorted(allowed)}: «{words.strip()}»"
    absent = [t for c in found for t in c.required if plain(t) not in {plain(x) for x in numbers(words)}]
    assert not absent, f"{where}: {names} computes {absent}, which the words do not print: «{words.strip()}»"
    resolved = [r for c in found for r in c.resolved()]
    if NEGATED.search(words):
        assert resolved and not all(resolved), f"{where}: says not resolved, but every interval of {names} excludes 0"
    elif VERDICT.search(words):
        assert resolved and all(resolved), (f"{where}: {VERDICT.search(words).group(0)!r} needs {names}'s intervals all "
                                            f"to exclude 0: {[c.intervals for c in found]}")
    if EVERY.search(words):
        recount = [c.universal for c in found if c.universal is not None]
        assert recount, f"{where}: {EVERY.search(words).group(0)!r} with no recount in {names}"
        assert all(recount), f"{where}: {EVERY.search(words).group(0)!r}, but {names}'s recount does not hold"


# ---- Times: each from its committed log ------------------------------------------------------------------

def printed_like(token: re.Match, seconds: float) -> str:
    """`seconds` as the token prints a time: "6 min 13 s", "23 s", "6.7 s", "8 min"."""
    if token.group(1):
        m, s = divmod(round(seconds), 60)
        return f"{m} min {s} s"
    if token.group(6):
        digits = len(token.group(6).split(".")[1]) if "." in token.group(6) else 0
        return f"{round(seconds, digits):.{digits}f} s"
    return f"{round(seconds / 60)} min"


def timed_files() -> list:
    return [README, NOTEBOOK] + sorted(EXERCISES.glob("*.md"))


def times(path: Path) -> list:
    """(line number, line, the time's match) of every time the file prints (the notebook: its Findings)."""
    text = path.read_text()
    offset = 0
    if path == NOTEBOOK:
        offset = text[:text.index("## Findings")].count("\n")
        text = findings(text)
    found, in_code = [], False
    for i, line in enumerate(text.split("\n")):
        in_code ^= line.startswith("```")
        if in_code:  # a code block: a command's comment only (its output is checked against the logs)
            command, comment = line.split(" # ", 1) if " # " in line else (line, "")
            line = TIME.sub(lambda m: " " * len(m.group(0)), command) + (" # " + comment if comment else "")
        found += [(offset + i + 1, line, m) for m in TIME.finditer(line) if not any(n in line for n in NOT_TIMES)]
    return found


@pytest.mark.parametrize("path", timed_files(), ids=lambda p: p.name)
def test_every_time_is_read_from_a_committed_log_on_a_named_machine(path):
    name = "README.md" if path == README else path.relative_to(EXERCISES.parent).as_posix() if path != NOTEBOOK \
        else "lab/RESULTS.md"
    entries = [(anchor, logs) for file, anchor, logs in claims.TIMES if file == name]
    text, wrong = path.read_text(), []
    for number, line, m in times(path):
        anchored = sorted(((line.rfind(a, 0, m.start()), a, logs) for a, logs in entries if a in line), reverse=True)
        before = [e for e in anchored if e[0] >= 0]
        candidates = [logs for _, a, logs in before if line.rfind(a, 0, m.start()) == before[0][0]] if before else \
            [logs for _, a, logs in anchored]
        if not candidates:
            wrong.append(f"{name}:{number}: {m.group(0)!r} has no log in lab/claims.py's TIMES")
            continue
        if m.group(3):  # a range: the shortest and the longest of the logs
            found = [claims.log_seconds(claims.RESULTS / log) for logs in candidates for log in logs]
            low, high = min(s for s, _ in found), max(s for s, _ in found)
            unit = 60 if m.group(5).startswith("min") else 1
            ok = (f"{round(low / unit)}", f"{round(high / unit)}") == (m.group(3), m.group(4))
            machines = {machine for _, machine in found}
        else:
            found = [claims.time_of(logs) for logs in candidates]
            ok = any(printed_like(m, seconds) == m.group(0) for seconds, _ in found)
            machines = {machine for seconds, machine in found if printed_like(m, seconds) == m.group(0)}
        if not ok:
            wrong.append(f"{name}:{number}: {m.group(0)!r}, but its logs say "
                         f"{[printed_like(m, s) if not m.group(3) else s for s, _ in found]}")
        elif not any(machine and (machine in line or machine in text) for machine in machines):
            wrong.append(f"{name}:{number}: {m.group(0)!r} was measured on {machines}, which the file does not name")
    assert not wrong, "\n".join(wrong)


# ---- Output copied from a command: each line from a committed log ----------------------------------------

def test_every_output_line_in_the_readme_is_in_a_committed_log():
    logs = "\n".join(p.read_text(errors="replace") for p in claims.RESULTS.rglob("*")
                     if p.is_file() and p.suffix in (".log", ".txt"))
    blocks = re.findall(r"```[a-z]*\n(.*?)```", README.read_text(), re.S)
    output = [line for block in blocks for line in block.splitlines()
              if line.strip() and not re.match(r"\s*(python|pip|bash|\$|#)", line)]
    assert output and not [line for line in output if line.rstrip() not in logs], \
        [line for line in output if line.rstrip() not in logs]
