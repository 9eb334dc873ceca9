"""The worker's end of a load-test pod (``repository.tuning.pod``): send one served config's bundle,
wait until its private server is ready, then ask for each run and read its result back.

Whatever carries the bytes is a ``CheckTransport``, as for a check pod: the Kubernetes launcher's
attached pod, or in the tests a local process. Stopping the transport (deleting the Job) is how a
cancel ends a run. No Django here.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import secrets
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from repository.config.check_wire import FrameReader, bundle_header, frame
from repository.tuning.loadgen import Shape
from repository.tuning.measure import WARMUP_S, RunResult
from repository.validation.runner import STDERR_TAIL_CHARS, CheckInput
from repository.validation.streamed import CheckTransport, bundle_for, send_bundle

# A run takes its duration plus the warm-up and the statistics calls; past this much more, the
# pod is taken for lost.
RUN_GRACE_S = 120.0


class RemoteStopped(Exception):
    """The run was stopped from the worker's side (a cancel)."""


def load_test_input(
    folder: Path, version_dir: Path, files: tuple[tuple[str, str], ...], *, config_text: str,
    model: str, version: int, bodies: list[bytes],
) -> CheckInput:  # fmt: skip
    """The bundle's contents: the version's files (re-hashed as they are packed), the config to
    serve and what to send, all under ``folder``."""
    config = folder / "served.pbtxt"
    config.write_text(config_text, encoding="utf-8")
    description = folder / "loadtest.json"
    encoded = [base64.b64encode(b).decode("ascii") for b in bodies]
    description.write_text(json.dumps({"model": model, "version": version, "bodies": encoded}))
    return CheckInput(
        input_dir=folder,
        model_dir=version_dir.parent,
        version_dir=version_dir,
        config_file=config,
        golden_file=description,
        files=files,
    )


class RemoteServer:
    """A private server running in a pod: ``open`` starts it, each ``measure`` is one run there,
    ``close`` stops the pod (safe to call twice, and before ``open`` finished)."""

    def __init__(self, check: CheckInput, *, start: Callable[[int], CheckTransport]) -> None:
        self._check, self._start = check, start
        self._transport: CheckTransport | None = None
        self._nonce = secrets.token_hex(16)
        self._reader = FrameReader(self._nonce)
        self._events: list[dict[str, Any]] = []
        self._stderr = bytearray()
        self._closed = threading.Event()

    def open(self, ready_timeout_s: float, stop: threading.Event) -> None:
        """Start the pod, send it the bundle and wait until its server is ready."""
        with bundle_for(self._check) as bundle:
            size = bundle.seek(0, 2)
            bundle.seek(0)
            self._transport = self._start(size)
            if self._closed.is_set():  # closed while the pod was starting
                self._transport.stop()
                raise RemoteStopped
            send_bundle(self._transport, bundle_header(self._nonce, size), bundle)
        self._next_event(ready_timeout_s, stop)

    def measure(self, shape: Shape, stop: threading.Event) -> RunResult:
        assert self._transport is not None
        self._transport.send(frame(self._nonce, "step", {"run": dataclasses.asdict(shape)}))
        event = self._next_event(shape.duration_s + WARMUP_S + RUN_GRACE_S, stop)
        return RunResult(**event["result"])

    def close(self) -> None:
        self._closed.set()
        if self._transport is not None:
            self._transport.stop()

    def _next_event(self, timeout_s: float, stop: threading.Event) -> dict[str, Any]:
        """The pod's next frame when it is a success; an error it reports, its exit, the deadline
        or ``stop`` raise."""
        assert self._transport is not None
        deadline = time.monotonic() + timeout_s
        while not self._events:
            if stop.is_set():
                self._transport.stop()
                raise RemoteStopped
            if time.monotonic() > deadline:
                raise RuntimeError(f"the load-test pod did not answer within {timeout_s:.0f} s")
            chunk = self._transport.receive(1.0)
            if chunk is None:
                tail = bytes(self._stderr[-STDERR_TAIL_CHARS:]).decode("utf-8", "replace")
                raise RuntimeError(f"the load-test pod exited: {tail.strip()[-500:]}")
            out, err = chunk
            self._stderr += err
            del self._stderr[:-STDERR_TAIL_CHARS]
            self._events += self._reader.feed(out)
        event = self._events.pop(0)
        if event.get("event") == "error":
            raise RuntimeError(f"the load-test pod: {event.get('message', '')}")
        return event
