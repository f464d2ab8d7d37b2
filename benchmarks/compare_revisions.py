r"""Before / after: one benchmark script at several git revisions, interleaved in one run, medians side by side.

Run from the repository root::

    python benchmarks/compare_revisions.py --rev 3e4e3c7 --rev HEAD --rounds 3 -- \
        benchmarks/bench_two_stage.py --datasets imdb_50k,steam_200k --repeats 3

Each revision is checked out once into a temporary ``git worktree`` (detached; removed at the end); then, for
``--rounds`` rounds, the script runs once per revision in turn (rev A, rev B, rev A, ...), each in a fresh
process whose ``PYTHONPATH`` is that revision's checkout — so both sides see the same machine load, and the
script itself is the revision's own copy (its imports match its package). A relative ``--data``-like path in
the script's arguments is made absolute first.

Every markdown table row the script prints (``| label | 1.23 | 4.5× | ...``) is read; each numeric cell, keyed
by (table header, row label — the row's leading text cells —, column; a repeated column name is prefixed by
the name before it), gets its median over the rounds per revision, and one table per benchmark table is printed
with the revisions side by side and the last revision's ratio to the first (below 1: faster or smaller).
Non-numeric cells are left out. Quote ``uptime`` with the result (printed at the start and the end): the
machine is shared.

This is a script, not a test: nothing here runs under pytest.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
_NUMBER = re.compile(r"^[-+]?\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?")

Key = tuple[str, str, str]  # (table header, row label, column)


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _number(cell: str) -> float | None:
    """The leading number of a cell ('1.23 s', '4.5×', '1,024'), or None."""
    match = _NUMBER.match(cell.strip())
    return float(match.group(0).replace(",", "")) if match else None


def parse_tables(text: str) -> dict[Key, float]:
    """Numeric cells of every markdown table in ``text``, keyed by (header line, row label, column name)."""
    cells: dict[Key, float] = {}
    header: list[str] | None = None
    for line in text.splitlines():
        if not line.startswith("|"):
            header = None
            continue
        parts = [p.strip() for p in line.strip().strip("|").split("|")]
        if header is None:
            header = _distinct_names(parts)
            continue
        if all(set(p) <= set("-: ") for p in parts):
            continue  # the separator row
        numbers = [_number(p) for p in parts]
        first = next((i for i, v in enumerate(numbers) if v is not None), len(parts))
        label = " · ".join(parts[: max(first, 1)])  # the leading text cells name the row (data set, input)
        for column, value in zip(header[max(first, 1) :], numbers[max(first, 1) :], strict=False):
            if value is not None:
                cells[(" | ".join(header), label, column)] = value
    return cells


def _distinct_names(header: list[str]) -> list[str]:
    """The header's column names, a repeated one named after the column before it (``ratio`` after
    ``hitting set (s)`` becomes ``hitting set (s) ratio``), so that no two columns share a key."""
    seen: set[str] = set()
    names: list[str] = []
    for i, name in enumerate(header):
        names.append(f"{header[i - 1]} {name}" if name in seen and i else name)
        seen.add(name)
    return names


def _absolute(args: list[str]) -> list[str]:
    """Relative paths that exist here become absolute (the script runs in another checkout)."""
    return [str(Path(a).resolve()) if not a.startswith("-") and Path(a).exists() else a for a in args]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rev", action="append", required=True, help="a git revision (give two or more)")
    parser.add_argument("--rounds", type=int, default=3, help="runs per revision, interleaved (default: 3)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- script.py [its arguments]")
    args = parser.parse_args(argv)
    command = [a for a in args.command if a != "--"]
    if len(set(args.rev)) < 2 or len(set(args.rev)) < len(args.rev) or not command or args.rounds < 1:
        parser.error("give at least two distinct --rev, --rounds >= 1 and a script after --")
    script, script_args = command[0], _absolute(command[1:])
    print(f"load at start: {_load()}", flush=True)
    results: dict[str, list[dict[Key, float]]] = defaultdict(list)
    with tempfile.TemporaryDirectory(prefix="compare-revisions-") as tmp:
        trees = {}
        for rev in args.rev:
            tree = Path(tmp) / f"rev{len(trees)}"
            subprocess.run(["git", "-C", str(REPO), "worktree", "add", "-q", "--detach", str(tree), rev], check=True)
            trees[rev] = tree
        try:
            for round_ in range(1, args.rounds + 1):
                for rev, tree in trees.items():
                    env = dict(os.environ, PYTHONPATH=str(tree))
                    own = tree / script if (tree / script).exists() else Path(script).resolve()
                    print(f"round {round_} · {rev} · load {_load()}", file=sys.stderr, flush=True)
                    out = subprocess.run(
                        [sys.executable, str(own), *script_args],
                        cwd=tree,
                        env=env,
                        capture_output=True,
                        text=True,
                        check=False,
                    )
                    if out.returncode != 0:
                        print(out.stdout + out.stderr, file=sys.stderr)
                        print(f"{rev}: the script failed (exit {out.returncode})", file=sys.stderr)
                        return 1
                    tables = parse_tables(out.stdout)
                    if not tables:  # e.g. a data folder found beside the repository, absent beside the worktree
                        print(out.stdout + out.stderr, file=sys.stderr)
                        print(f"{rev}: the script printed no table row (pass data paths explicitly)", file=sys.stderr)
                        return 1
                    results[rev].append(tables)
        finally:
            for tree in trees.values():
                subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)], check=False)
    print(_report(args.rev, results, args.rounds))
    print(f"\nload at end: {_load()}")
    return 0


def _report(revs: list[str], results: dict[str, list[dict[Key, float]]], rounds: int) -> str:
    """One table per benchmark table: each numeric cell's median per revision, and last / first."""
    medians = {
        rev: {key: statistics.median(r[key] for r in runs if key in r) for key in set().union(*runs)}
        for rev, runs in results.items()
    }
    keys = sorted(set().union(*medians.values()), key=lambda k: (k[0], k[1], k[2]))
    lines: list[str] = [f"medians of {rounds} interleaved runs per revision"]
    table = None
    for header, label, column in keys:
        if header != table:
            table = header
            title = "| row | column | " + " | ".join(revs) + f" | {revs[-1]} / {revs[0]} |"
            lines += ["", f"table: {header}", "", title]
            lines.append("|---|---|" + "---|" * len(revs) + "---|")
        values = [medians[rev].get((header, label, column)) for rev in revs]
        shown = ["—" if v is None else f"{v:.4g}" for v in values]
        first, last = values[0], values[-1]
        ratio = f"{last / first:.2f}" if first and last is not None else "—"
        lines.append(f"| {label} | {column} | " + " | ".join(shown) + f" | {ratio} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
