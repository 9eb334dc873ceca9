"""Run ``python -m serving.check`` in a child process: inside the sandbox, with its limits.

The child streams its steps as JSON lines on stdout and writes its report to a pipe the worker
reads (``--report /dev/fd/N``): there is no report file the model could pre-write or link
elsewhere. Whatever arrives is the model's claim, and the pipeline re-checks it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from django.conf import settings

from repository.sandbox import (
    CheckLimits,
    SandboxLayout,
    SandboxPolicy,
    sandbox_probe,
    sandboxed_argv,
)
from repository.sandbox.cgroups import CheckCgroup
from repository.sandbox.command import HOME, SOURCE_ROOT, TMP
from repository.sandbox.environment import check_env
from repository.sandbox.limits import child_setup

logger = logging.getLogger(__name__)

STDERR_TAIL_CHARS = 4000
# A report larger than this is not read to the end (and so does not parse): a model cannot make
# the worker buffer unbounded output.
MAX_REPORT_BYTES = 256 * 1024**2
MAX_STEP_LINE_BYTES = 64 * 1024
MAX_STEPS = 64

__all__ = ["CheckInput", "CheckLimits", "CheckOutcome", "check_command", "run_check"]


@dataclasses.dataclass(frozen=True)
class CheckInput:
    """The host folder holding one version's copy and the files the check reads, all under
    ``input_dir`` (the only host folder the sandbox sees, read-only). ``files`` lists the
    version's files as (path under ``input_dir``, registry sha256): a check pod's bundle is packed
    from them and re-hashed."""

    input_dir: Path
    model_dir: Path
    version_dir: Path
    config_file: Path | None = None
    golden_file: Path | None = None
    files: tuple[tuple[str, str], ...] = ()


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
        # bubblewrap reports its child's death by signal N as status 128 + N.
        signum = -self.returncode if self.returncode < 0 else self.returncode - 128
        if signum in set(signal.Signals):
            name = signal.Signals(signum).name
            return f"the check process was killed by {name} (memory or CPU limit?)"
        tail = self.stderr_tail.strip().splitlines()[-1:] or ["no report written"]
        return f"the check process exited with status {self.returncode}: {tail[0]}"


def check_command(
    *,
    model_dir: str,
    version_dir: str,
    config_file: str | None,
    golden_file: str | None,
    report_file: str,
) -> list[str]:
    module = str(settings.PORTICO_VALIDATION_CHECK_MODULE)
    cmd = [sys.executable, "-m", module, "--model-dir", model_dir, "--version-dir", version_dir]
    cmd += ["--report", report_file]
    if config_file is not None:
        cmd += ["--config", config_file]
    if golden_file is not None:
        cmd += ["--golden", golden_file]
    return cmd


def run_check(
    check: CheckInput, *, limits: CheckLimits, on_step: Callable[[dict[str, Any]], None]
) -> CheckOutcome:
    """Run the check; ``on_step`` gets each JSON step line as it arrives; killed at the limit.

    Raises ``SandboxUnavailableError`` when the sandbox is on and cannot be set up.
    """
    policy = SandboxPolicy.from_settings()
    if policy.enabled:
        sandbox_probe(policy)
    report_r, report_w = os.pipe()
    try:
        argv, env = _command(check, policy, limits, report_fd=report_w)
    except BaseException:
        os.close(report_r)
        os.close(report_w)
        raise
    return _run(argv, env, check.input_dir, limits, report_r, report_w, on_step)


def _command(
    check: CheckInput, policy: SandboxPolicy, limits: CheckLimits, *, report_fd: int
) -> tuple[list[str], dict[str, str]]:
    report = f"/dev/fd/{report_fd}"
    if not policy.enabled:
        return _unconfined_command(check, report, policy)
    layout = SandboxLayout(
        base_dir=Path(settings.BASE_DIR),
        input_dir=check.input_dir,
        check_module=str(settings.PORTICO_VALIDATION_CHECK_MODULE),
    )
    inner = check_command(
        model_dir=layout.inside(check.model_dir),
        version_dir=layout.inside(check.version_dir),
        config_file=layout.inside(check.config_file) if check.config_file else None,
        golden_file=layout.inside(check.golden_file) if check.golden_file else None,
        report_file=report,
    )
    argv = sandboxed_argv(policy=policy, limits=limits, layout=layout, argv=inner)
    env = check_env(pythonpath=SOURCE_ROOT, home=HOME, tmpdir=TMP, pass_env=policy.pass_env)
    return argv, env


def _unconfined_command(
    check: CheckInput, report: str, policy: SandboxPolicy
) -> tuple[list[str], dict[str, str]]:
    """The sandbox switched off: the same check on the host, still with the scrubbed env."""
    scratch = check.input_dir / "scratch"
    scratch.mkdir(exist_ok=True)
    argv = check_command(
        model_dir=str(check.model_dir),
        version_dir=str(check.version_dir),
        config_file=str(check.config_file) if check.config_file else None,
        golden_file=str(check.golden_file) if check.golden_file else None,
        report_file=report,
    )
    env = check_env(
        pythonpath=str(settings.BASE_DIR),
        home=str(scratch),
        tmpdir=str(scratch),
        pass_env=policy.pass_env,
    )
    return argv, env


def _run(
    argv: list[str],
    env: dict[str, str],
    cwd: Path,
    limits: CheckLimits,
    report_r: int,
    report_w: int,
    on_step: Callable[[dict[str, Any]], None],
) -> CheckOutcome:
    cgroup = CheckCgroup.create(limits)
    with tempfile.TemporaryFile(mode="w+b") as stderr, _closing(cgroup):
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=stderr,
            stdin=subprocess.DEVNULL,
            cwd=str(cwd),
            env=env,
            pass_fds=(report_w,),
            start_new_session=True,
            preexec_fn=_child_preexec(limits, cgroup),
        )
        os.close(report_w)  # only the child holds the write end: EOF when it is gone
        report_reader = _ReportReader(report_r)  # owns report_r from here on
        try:
            timed_out = _pump(proc, limits.time_limit_s, on_step)
        finally:
            # NOTE: in the sandbox the check's processes live in their own PID namespace and die
            # with bwrap; unconfined, the process group is the best there is.
            _kill_group(proc.pid)
            proc.wait()
            assert proc.stdout is not None
            proc.stdout.close()
        report = report_reader.result() if not timed_out else None
        stderr.seek(0, os.SEEK_END)
        stderr.seek(max(0, stderr.tell() - STDERR_TAIL_CHARS))
        tail = stderr.read().decode("utf-8", "replace")
    return CheckOutcome(report, proc.returncode, tail, timed_out)


def _child_preexec(limits: CheckLimits, cgroup: CheckCgroup | None) -> Callable[[], None]:
    setup = child_setup(limits)
    if cgroup is None:
        return setup
    join = cgroup.joiner()

    def apply() -> None:
        join()  # NOTE: first, so that bubblewrap and all it starts are born inside the group
        setup()

    return apply


@contextlib.contextmanager
def _closing(cgroup: CheckCgroup | None) -> Iterator[None]:
    try:
        yield
    finally:
        if cgroup is not None:
            cgroup.close()


class _ReportReader:
    """Drains the report pipe on a thread (a large report must not block the child)."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._chunks: list[bytes] = []
        self._size = 0
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            while chunk := os.read(self._fd, 1 << 20):
                self._size += len(chunk)
                if self._size <= MAX_REPORT_BYTES:
                    self._chunks.append(chunk)
        except OSError:
            pass
        finally:
            os.close(self._fd)

    def result(self) -> dict[str, Any] | None:
        self._thread.join(timeout=5)
        if self._thread.is_alive() or self._size > MAX_REPORT_BYTES:
            return None
        try:
            data = json.loads(b"".join(self._chunks))
        except ValueError:
            return None
        return data if isinstance(data, dict) else None


def _pump(
    proc: subprocess.Popen[bytes], time_limit_s: float, on_step: Callable[[dict[str, Any]], None]
) -> bool:
    """Feed stdout lines to ``on_step`` until the child exits; True when the deadline killed it."""
    lines: queue.Queue[bytes | None] = queue.Queue()
    assert proc.stdout is not None
    reader = threading.Thread(target=_read_lines, args=(proc.stdout, lines), daemon=True)
    reader.start()
    deadline = time.monotonic() + time_limit_s
    delivered = 0
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
        if delivered < MAX_STEPS and _deliver(line, on_step):
            delivered += 1
    try:
        proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        _kill(proc)
        return True
    return False


def _read_lines(stream: IO[bytes], lines: queue.Queue[bytes | None]) -> None:
    try:
        # NOTE: bounded reads: the model controls this stream (a longer line is not a step).
        while line := stream.readline(MAX_STEP_LINE_BYTES):
            lines.put(line)
    except (ValueError, OSError):
        pass  # the pipe was closed under us after a kill
    finally:
        lines.put(None)


def _deliver(line: bytes, on_step: Callable[[dict[str, Any]], None]) -> bool:
    try:
        step = json.loads(line)
    except ValueError:
        return False  # stray print() from model code is not a step
    if not (isinstance(step, dict) and "name" in step and "status" in step):
        return False
    on_step(step)
    return True


def _kill(proc: subprocess.Popen[bytes]) -> None:
    _kill_group(proc.pid)
    proc.wait()


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
