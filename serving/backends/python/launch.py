"""Starting model code in processes the server contains, and ending every process it started.

A Python model's process (and its ``auto_complete_config`` run) gets:

- an allow-listed environment (``repository.config.child_env``): no database URL, ``SECRET_KEY``,
  Redis URL or storage and cloud credentials, ``HOME`` pointed away from the server's;
- its own session, so a Ctrl-C to the server's process group does not kill it under a draining
  server (the server finalises it on unload);
- death with the server: ``PR_SET_PDEATHSIG`` = SIGKILL. Linux sends that signal when the *thread*
  that forked the child ends, so every launch happens on one launcher thread that lives as long as
  the server;
- where bubblewrap can make one, its own PID namespace: whatever the model forks (even a child that
  starts its own session to escape a group kill) dies when the namespace's first process does,
  and that process dies with the server. In it, the folders the server ``protect``s (the blob
  cache) are mounted read-only and no capability is left (not even for root) to remount them.
  Without bubblewrap the server still kills the process group, which a child that calls
  ``setsid()`` escapes; a warning says so once.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import ctypes
import functools
import logging
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import serving
from repository.config.child_env import child_env

logger = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1
_BWRAP_PREFIX = ("--dev-bind", "/", "/", "--unshare-pid", "--die-with-parent", "--cap-drop", "ALL")
_PROBE_TIMEOUT_S = 10.0
_UNCONTAINED = "processes a Python model forks may outlive the server"

_jobs: queue.SimpleQueue[tuple[Callable[[], Any], concurrent.futures.Future[Any]]] = (
    queue.SimpleQueue()
)
_launcher_lock = threading.Lock()
_launcher: threading.Thread | None = None
_read_only: set[str] = set()


def protect(folder: Path) -> None:
    """Show ``folder`` read-only to every model process started from now on."""
    _read_only.add(str(folder.resolve()))


def unprotect(folder: Path) -> None:
    _read_only.discard(str(folder.resolve()))


def model_env() -> dict[str, str]:
    """The environment model code runs with (the stub importable, nothing secret)."""
    root = str(Path(serving.__file__).resolve().parent.parent)
    return child_env(os.environ, home=tempfile.gettempdir(), extra={"PYTHONPATH": root})


def stub_command(*args: str) -> list[str]:
    """``python -m serving.backends.python.stub ARGS``, in a PID namespace where one is possible."""
    command = [sys.executable, "-m", "serving.backends.python.stub", *args]
    bwrap = _bwrap()
    if not bwrap:
        return command
    folders = sorted(f for f in _read_only if os.path.isdir(f))
    mounts = [arg for folder in folders for arg in ("--ro-bind", folder, folder)]
    return [bwrap, *_BWRAP_PREFIX, *mounts, "--", *command]


def launch(
    command: Sequence[str], *, pass_fds: Sequence[int] = (), stdout: int | None = None
) -> subprocess.Popen[bytes]:
    """Start ``command`` contained (see the module docstring) from the launcher thread."""
    popen = functools.partial(
        subprocess.Popen,
        list(command),
        pass_fds=tuple(pass_fds),
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        env=model_env(),
        start_new_session=True,
        preexec_fn=_die_with_parent,
    )
    future: concurrent.futures.Future[subprocess.Popen[bytes]] = concurrent.futures.Future()
    _ensure_launcher()
    _jobs.put((popen, future))
    return future.result()


def kill(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL the process and every process of its group (its namespace goes with it)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            process.kill()


def exit_description(code: int) -> str:
    """How a launched process ended (bubblewrap reports a child's signal N as 128 + N)."""
    if code < 0:
        return f"exited with signal {-code}"
    if code > 128 and _bwrap():
        return f"exited with signal {code - 128}"
    return f"exited with code {code}"


@functools.cache
def _bwrap() -> str:
    """bubblewrap's path when it can make a PID namespace here, else ''."""
    path = shutil.which("bwrap")
    if path is None:
        logger.warning("bubblewrap not found: %s", _UNCONTAINED)
        return ""
    try:
        probe = subprocess.run(
            [path, *_BWRAP_PREFIX, "--", "true"], capture_output=True, timeout=_PROBE_TIMEOUT_S
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        probe_error = str(error)
    else:
        if probe.returncode == 0:
            return path
        probe_error = probe.stderr.decode(errors="replace").strip()
    logger.warning(
        "bubblewrap cannot create a PID namespace here (%s): %s", probe_error, _UNCONTAINED
    )
    return ""


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    if sys.platform == "linux":
        _libc().prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


@functools.cache
def _libc() -> Any:
    return ctypes.CDLL(None, use_errno=True)


def _ensure_launcher() -> None:
    global _launcher
    with _launcher_lock:
        if _launcher is None:
            _libc()  # NOTE: loaded here, never between fork and exec
            _launcher = threading.Thread(target=_run_launcher, name="python-launcher", daemon=True)
            _launcher.start()


def _run_launcher() -> None:
    # NOTE: never returns: its end would send PR_SET_PDEATHSIG to every model process.
    while True:
        job, future = _jobs.get()
        try:
            future.set_result(job())
        except BaseException as error:  # noqa: BLE001 - the caller re-raises it
            future.set_exception(error)
