"""Run ``python -m serving.check`` in a child process with time and memory limits."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import dataclasses
import json
import logging
import os
import queue
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from django.conf import settings

logger = logging.getLogger(__name__)

STDERR_TAIL_CHARS = 4000


@dataclasses.dataclass(frozen=True)
class CheckLimits:
    """Wall-clock seconds and address-space bytes the child may use."""

    time_limit_s: float
    memory_limit_bytes: int

    @classmethod
    def from_settings(cls) -> CheckLimits:
        return cls(
            time_limit_s=float(settings.PORTICO_VALIDATION_TIME_LIMIT_S),
            memory_limit_bytes=int(settings.PORTICO_VALIDATION_MEMORY_LIMIT_BYTES),
        )


@dataclasses.dataclass(frozen=True)
class CheckOutcome:
    """What the child left: its JSON report (None if it wrote none), exit status, stderr tail."""

    report: dict[str, Any] | None
    returncode: int
    stderr_tail: str
    timed_out: bool

    def failure_reason(self) -> str:
        if self.timed_out:
            return "the check ran past its time limit and was stopped"
        if self.returncode < 0:
            name = signal.Signals(-self.returncode).name
            return f"the check process was killed by {name} (memory limit?)"
        tail = self.stderr_tail.strip().splitlines()[-1:] or ["no report written"]
        return f"the check process exited with status {self.returncode}: {tail[0]}"


def check_command(
    *,
    model_dir: Path,
    version_dir: Path,
    config_file: Path | None,
    golden_file: Path | None,
    report_file: Path,
) -> list[str]:
    # The module is a setting only so tests can stand in a scripted check; serving.check is the one.
    module = getattr(settings, "PORTICO_VALIDATION_CHECK_MODULE", "serving.check")
    cmd = [
        sys.executable,
        "-m",
        module,
        "--model-dir",
        str(model_dir),
        "--version-dir",
        str(version_dir),
        "--report",
        str(report_file),
    ]
    if config_file is not None:
        cmd += ["--config", str(config_file)]
    if golden_file is not None:
        cmd += ["--golden", str(golden_file)]
    return cmd


def run_check(
    cmd: list[str],
    *,
    report_file: Path,
    limits: CheckLimits,
    on_step: Callable[[dict[str, Any]], None],
) -> CheckOutcome:
    """Run the check; ``on_step`` gets each JSON step line as it arrives; killed at the limit."""
    with tempfile.TemporaryFile(mode="w+b") as stderr:
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=stderr,
            stdin=subprocess.DEVNULL,
            cwd=str(settings.BASE_DIR),
            env=_child_env(),
            start_new_session=True,
            preexec_fn=_child_setup(limits.memory_limit_bytes),
        )
        try:
            timed_out = _pump(proc, limits.time_limit_s, on_step)
        finally:
            _kill_group(proc.pid)  # leftovers the child started and did not stop
            proc.wait()
            assert proc.stdout is not None
            proc.stdout.close()
        stderr.seek(0, os.SEEK_END)
        stderr.seek(max(0, stderr.tell() - STDERR_TAIL_CHARS))
        tail = stderr.read().decode("utf-8", "replace")
    report = _read_report(report_file) if not timed_out else None
    return CheckOutcome(report, proc.returncode, tail, timed_out)


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    root = str(settings.BASE_DIR)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [root, env.get("PYTHONPATH", "")] if p)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _child_setup(limit: int) -> Callable[[], None]:
    """Runs in the child before exec: address-space limit, and die if the worker dies."""
    libc = _libc()

    def apply() -> None:
        if limit > 0:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        if libc is not None:
            # NOTE: a worker killed mid-validation must not leave its check running unwatched.
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)

    return apply


PR_SET_PDEATHSIG = 1


def _libc() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None


def _pump(
    proc: subprocess.Popen[bytes], time_limit_s: float, on_step: Callable[[dict[str, Any]], None]
) -> bool:
    """Feed stdout lines to ``on_step`` until the child exits; True when the deadline killed it."""
    lines: queue.Queue[bytes | None] = queue.Queue()
    assert proc.stdout is not None
    reader = threading.Thread(target=_read_lines, args=(proc.stdout, lines), daemon=True)
    reader.start()
    deadline = time.monotonic() + time_limit_s
    while True:
        try:
            line = lines.get(timeout=max(0.0, min(1.0, deadline - time.monotonic())))
        except queue.Empty:
            if time.monotonic() >= deadline:
                _kill(proc)
                return True
            continue
        if line is None:
            break
        _deliver(line, on_step)
    try:
        proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        _kill(proc)
        return True
    return False


def _read_lines(stream: IO[bytes], lines: queue.Queue[bytes | None]) -> None:
    try:
        for line in stream:
            lines.put(line)
    except (ValueError, OSError):
        pass  # the pipe was closed under us after a kill
    finally:
        lines.put(None)


def _deliver(line: bytes, on_step: Callable[[dict[str, Any]], None]) -> None:
    try:
        step = json.loads(line)
    except ValueError:
        return  # stray print() from model code is not a step
    if isinstance(step, dict) and "name" in step and "status" in step:
        on_step(step)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    # NOTE: the child leads its own session, so its helpers (Python-backend stubs) die with it.
    _kill_group(proc.pid)
    proc.wait()


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _read_report(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
