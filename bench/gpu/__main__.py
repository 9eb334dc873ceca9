"""``python -m bench.gpu [--wheels DIR] [--python PY] [--venv DIR]``: the one-shot GPU check.

Phases, each with its own time budget inside an eight-minute total: preflight (is there an
NVIDIA GPU?), venv (requirements-gpu.lock, from DIR alone with ``--wheels``; skipped with
``--python``, an interpreter that already has the GPU requirements), tests (every test marked
``gpu``, where a skip is a failure) and bench (``bench.gpu.measure``). Standard library only: it
runs before anything is installed. Exit status 0 when every phase passed, 2 without a GPU.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from bench.gpu.devices import device_line, missing_gpu_reason

ROOT = Path(__file__).resolve().parents[2]
TOTAL_S = 470.0  # under eight minutes, with room to write the report
BUDGET_S = {"venv": 240.0, "tests": 150.0}
NO_GPU_EXIT = 2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu", description=__doc__)
    parser.add_argument("--wheels", type=Path, help="install from this wheel folder only")
    parser.add_argument("--python", type=Path, help="use this interpreter; make no venv")
    parser.add_argument("--venv", type=Path, default=ROOT / "var" / "gpu-venv")
    args = parser.parse_args(argv)
    started = time.monotonic()
    reason = missing_gpu_reason()
    if reason is not None:
        print(
            f"gpu-check: cannot run here: {reason}. It needs a machine with an NVIDIA GPU and "
            "its driver; nothing was installed, tested or measured.",
            file=sys.stderr,
        )
        return NO_GPU_EXIT
    print(f"gpu-check: GPU {device_line()}", flush=True)
    outcomes: dict[str, str] = {}
    python = args.python or _venv(args, outcomes)
    if python is not None:
        left = lambda: TOTAL_S - (time.monotonic() - started)  # noqa: E731
        outcomes["tests"] = _phase(
            [str(python), "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", "tests"],
            min(BUDGET_S["tests"], left() - 120),
            env={"PORTICO_GPU_CHECK": "1"},
        )
        until = time.time() + left() - 10
        outcomes["bench"] = _phase(
            [str(python), "-m", "bench.gpu.measure", "--until", f"{until:.0f}"], left() - 5
        )
    for phase, outcome in outcomes.items():
        print(f"gpu-check: {phase}: {outcome}")
    print(f"gpu-check: {time.monotonic() - started:.0f} s in all")
    return 0 if outcomes and all(o == "passed" for o in outcomes.values()) else 1


def _venv(args: argparse.Namespace, outcomes: dict[str, str]) -> Path | None:
    python = args.venv / "bin" / "python"
    source = ["--no-index", "--find-links", str(args.wheels)] if args.wheels else []
    steps = [
        [sys.executable, str(ROOT / "deploy" / "gpu" / "lock.py")],
        [sys.executable, "-m", "venv", str(args.venv)],
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--quiet",
            *source,
            "-r",
            str(ROOT / "requirements-gpu.lock"),
        ],
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "-e",
            str(ROOT),
        ],
    ]
    deadline = time.monotonic() + BUDGET_S["venv"]
    for step in steps:
        outcome = _phase(step, deadline - time.monotonic())
        if outcome != "passed":
            outcomes["venv"] = f"{outcome} ({' '.join(step[:5])} ...)"
            return None
    outcomes["venv"] = "passed"
    return python


def _phase(command: list[str], budget_s: float, env: dict[str, str] | None = None) -> str:
    """Run one step within ``budget_s``; "passed", or what went wrong."""
    if budget_s <= 0:
        return "not run: no time left"
    print(f"gpu-check: $ {' '.join(command)}  (budget {budget_s:.0f} s)", flush=True)
    try:
        done = subprocess.run(
            command, cwd=ROOT, env={**os.environ, **(env or {})}, timeout=budget_s, check=False
        )
    except subprocess.TimeoutExpired:
        return f"failed: over its {budget_s:.0f} s budget"
    return "passed" if done.returncode == 0 else f"failed (exit status {done.returncode})"


if __name__ == "__main__":
    sys.exit(main())
