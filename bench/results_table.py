"""Turn the RESULT lines of a benchmark run into the table BENCHMARKS.md opens with.

Usage::

    python bench/results_table.py bench/results/latest.log            # print the table
    python bench/results_table.py bench/results/latest.log --write BENCHMARKS.md

The input is what ``make bench`` records in ``bench/results/latest.log``: for each script
a header line ``== bench/<script>.py (commit <sha>, <UTC time>)``, the script's own
output (whose first line describes the machine and its load), and its ``RESULT`` lines::

    RESULT <name> ratio=<x> target=<y> PASS|FAIL

Headers written by hand in the older form ``### python bench/<script>.py ... (commit
<sha>...)`` are read too. A result is one row per name and script arguments (the same
script at another size is another row); when the same row appears again, the last
line wins (a log may hold a rerun). ``--write FILE`` replaces the text between the
markers ``<!-- results:begin -->`` and ``<!-- results:end -->`` in FILE and fails,
changing nothing, if FILE lacks them.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

RESULT = re.compile(r"^RESULT (\w+) ratio=(\S+) target=(\S+) (PASS|FAIL)$")
HEADER = re.compile(r"^(?:== |### python )bench/(\w+)\.py\b(.*)$")
COMMIT = re.compile(r"commit ([0-9a-f]{7,40})")
MACHINE = re.compile(r"^\d+ CPUs? \(")
BEGIN, END = "<!-- results:begin -->", "<!-- results:end -->"


@dataclass(frozen=True, slots=True)
class Result:
    """One target's outcome as the last run of its script printed it."""

    name: str
    args: str
    value: str
    target: str
    passed: bool
    script: str
    commit: str
    machine: str


def parse(lines: Iterable[str]) -> list[Result]:
    """The results in ``lines``, in first-seen order.

    A result is keyed by its name and its script's arguments (one script run at two
    sizes prints the same names); for the same key the last line wins.
    """
    script, args, commit, machine = "?", "", "?", "?"
    found: dict[tuple[str, str], Result] = {}
    for raw in lines:
        line = raw.rstrip("\n")
        if header := HEADER.match(line):
            script, rest = header.group(1), header.group(2)
            args = rest.split(" (", 1)[0].strip(" ,")
            sha = COMMIT.search(rest)
            commit, machine = (sha.group(1)[:7] if sha else "?"), "?"
        elif MACHINE.match(line):
            machine = line
        elif result := RESULT.match(line):
            name, value, target, verdict = result.groups()
            found[name, args] = Result(
                name, args, value, target, verdict == "PASS", script, commit, machine
            )
    return list(found.values())


def render(results: list[Result]) -> str:
    """A markdown table: one row per target, failures first, then by name.

    The ``machine`` column names the machine line (CPUs, memory, Python and the load
    average at the script's start) listed under the table as ``m1``, ``m2``, …; ``?``
    where the log did not record it.
    """
    rows = sorted(results, key=lambda r: (r.passed, r.name))
    machines = sorted({r.machine for r in rows if r.machine != "?"})
    label = {m: f"m{i}" for i, m in enumerate(machines, 1)}
    out = [
        "| target | value | wanted | verdict | script | commit | machine |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    out += [
        f"| `{r.name}` | {r.value} | `{r.target}` | {'PASS' if r.passed else '**FAIL**'} "
        f"| `{r.script}.py{' ' + r.args if r.args else ''}` | `{r.commit}` "
        f"| {label.get(r.machine, '?')} |"
        for r in rows
    ]
    if machines:
        out += ["", "Machine and load at each script's start:", ""]
        out += [f"- {label[m]}: {m}" for m in machines]
    return "\n".join(out)


def write(path: Path, table: str) -> None:
    """Put ``table`` between the result markers of ``path``."""
    text = path.read_text()
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise SystemExit(f"{path}: no '{BEGIN}' ... '{END}' markers to write the table between")
    path.write_text(text[: start + len(BEGIN)] + "\n" + table + "\n" + text[end:])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    ap.add_argument("logs", nargs="+", type=Path, help="benchmark output to read, in order")
    ap.add_argument("--write", type=Path, metavar="FILE", help="update FILE between the markers")
    args = ap.parse_args(argv)
    lines: list[str] = []
    for log in args.logs:
        try:
            lines += log.read_text().splitlines()
        except OSError as exc:
            raise SystemExit(f"{log}: cannot read: {exc.strerror}") from exc
    results = parse(lines)
    if not results:
        raise SystemExit(f"no RESULT lines in {', '.join(map(str, args.logs))}")
    table = render(results)
    if args.write:
        write(args.write, table)
    else:
        print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
