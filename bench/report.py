"""Write benchmark tables into docs/benchmarks.md, each between its own markers, so that one
suite's run replaces only its own section and leaves the others (and the prose around them)
alone."""

from __future__ import annotations

import platform
import re
import subprocess
import time
from pathlib import Path

BENCHMARKS_MD = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"


def machine_line(note: str = "load generator on the same machine") -> str:
    import os

    return (
        f"Measured {time.strftime('%Y-%m-%d')} on {os.cpu_count()} cores "
        f"({platform.machine()}, Python {platform.python_version()}), {note}."
    )


def table(headers: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


UNSTABLE_NOTE = (
    "† perf_analyzer found no three windows within 30 % of each other (a busy machine); "
    "the figure is from windows measured with any spread."
)


def unstable_note(results: list[object]) -> str:
    """The footnote for '†', where some figure carries it."""
    return UNSTABLE_NOTE if any(mark(result) for result in results) else ""


def mark(result: object) -> str:
    """'†' after a figure whose measurement did not stabilise."""
    return "" if getattr(result, "stable", True) else " †"


def mark_any(results: list[object]) -> str:
    """'†' after a median that some unstable measurement went into."""
    return next((mark(result) for result in results if mark(result)), "")


def tree_commit(tree: Path) -> str:
    """The short commit a tree has checked out (how a table names its baseline)."""
    found = subprocess.run(
        ["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    return found.stdout.strip() or "(not a git tree)"


def write_section(name: str, body: str) -> None:
    start, end = f"<!-- bench:{name}:start -->", f"<!-- bench:{name}:end -->"
    text = BENCHMARKS_MD.read_text() if BENCHMARKS_MD.exists() else "# Benchmarks\n"
    # An empty part (a footnote no figure needs) leaves no run of blank lines behind.
    body = re.sub(r"\n{3,}", "\n\n", body.strip())
    block = f"{start}\n{body}\n{end}"
    pattern = re.compile(re.escape(start) + ".*?" + re.escape(end), re.S)
    found = pattern.search(text)
    text = pattern.sub(lambda _: block, text) if found else f"{text}\n{block}\n"
    BENCHMARKS_MD.parent.mkdir(parents=True, exist_ok=True)
    BENCHMARKS_MD.write_text(text)
