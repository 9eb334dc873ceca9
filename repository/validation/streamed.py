"""Run a check that reads its version from stdin and answers in frames (a check pod), whatever
carries the bytes: the bundle goes in, steps are delivered as they arrive, the report is kept,
and the wall-clock limit and failure reasons are the bubblewrap runner's.

A ``CheckTransport`` is one started check process: the Kubernetes launcher attaches to a pod;
tests use a local subprocess.
"""

from __future__ import annotations

import secrets
import tempfile
import threading
import time
from collections.abc import Callable
from typing import IO, Any, Protocol

from repository.config.check_wire import FrameReader, bundle_header
from repository.sandbox import CheckLimits
from repository.validation.bundle import bundle_write
from repository.validation.runner import MAX_STEPS, STDERR_TAIL_CHARS, CheckInput, CheckOutcome

CHUNK_BYTES = 1 << 20


class CheckTransport(Protocol):
    """A started check process."""

    def send(self, data: bytes) -> None:
        """Write to its stdin (may block while it reads)."""

    def receive(self, timeout_s: float) -> tuple[bytes, bytes] | None:
        """The next (stdout, stderr) chunk, ``(b"", b"")`` when none came in time, None once it
        exited and all its output was read."""

    def returncode(self) -> int:
        """Its exit status, once ``receive`` returned None."""

    def stop(self) -> None:
        """Kill it (if still running) and release what it holds; safe to call twice."""


def bundle_for(check: CheckInput) -> IO[bytes]:
    """The bundle in a temporary file, rewound; ``BlobIntegrityError`` if a file changed."""
    spool = tempfile.TemporaryFile()  # noqa: SIM115 - the caller closes it
    try:
        bundle_write(check, spool)
        spool.seek(0)
    except BaseException:
        spool.close()
        raise
    return spool


def run_streamed_check(
    bundle: IO[bytes],
    *,
    start: Callable[[], CheckTransport],
    limits: CheckLimits,
    on_step: Callable[[dict[str, Any]], None],
) -> CheckOutcome:
    """Start the check, feed it ``bundle``, collect its frames until it exits or the limit."""
    nonce = secrets.token_hex(16)
    size = bundle.seek(0, 2)
    bundle.seek(0)
    transport = start()
    try:
        deadline = time.monotonic() + limits.time_limit_s
        sender = threading.Thread(
            target=send_bundle, args=(transport, bundle_header(nonce, size), bundle), daemon=True
        )
        sender.start()
        reader = FrameReader(nonce)
        stderr = bytearray()
        timed_out = _collect(transport, reader, stderr, deadline, on_step)
        returncode = -1 if timed_out else transport.returncode()
    finally:
        transport.stop()
    tail = bytes(stderr[-STDERR_TAIL_CHARS:]).decode("utf-8", "replace")
    return CheckOutcome(None if timed_out else reader.report, returncode, tail, timed_out)


def send_bundle(transport: CheckTransport, header: bytes, bundle: IO[bytes]) -> None:
    """Write the header and the bundle; a pod that stops reading says why in its own output."""
    try:
        transport.send(header)
        while chunk := bundle.read(CHUNK_BYTES):
            transport.send(chunk)
    except (OSError, ValueError):
        pass  # the check stopped reading (it refused the bundle, or was killed): its output says


def _collect(
    transport: CheckTransport,
    reader: FrameReader,
    stderr: bytearray,
    deadline: float,
    on_step: Callable[[dict[str, Any]], None],
) -> bool:
    """Deliver steps until the check's output ends; True when the deadline came first."""
    delivered = 0
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return True
        chunk = transport.receive(min(1.0, remaining))
        if chunk is None:
            return False
        out, err = chunk
        stderr += err
        del stderr[:-STDERR_TAIL_CHARS]
        for step in reader.feed(out):
            if delivered < MAX_STEPS and "name" in step and "status" in step:
                on_step(step)
                delivered += 1
