"""A check pod's process started locally: ``python -m serving.check --bundle-stdin`` as a real
subprocess with pipes, standing where the Kubernetes launcher attaches to a pod."""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO

from repository.config.child_env import child_env

ROOT = Path(__file__).resolve().parents[3]


class LocalCheckProcess:
    def __init__(
        self,
        scratch: Path,
        *,
        max_bundle_bytes: int,
        argv: list[str] | None = None,
        extra: tuple[str, ...] = (),
    ) -> None:
        scratch.mkdir(parents=True, exist_ok=True)
        command = argv or [sys.executable, "-m", "serving.check", "--bundle-stdin"]
        command += ["--scratch", str(scratch), "--max-bundle-bytes", str(max_bundle_bytes)]
        command += extra
        env = child_env(os.environ, home=str(scratch), extra={"PYTHONPATH": str(ROOT)})
        self.proc = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=str(scratch),
            env=env,
            start_new_session=True,
        )
        self._chunks: queue.Queue[tuple[bytes, bytes] | None] = queue.Queue()
        self._open = 2
        assert self.proc.stdout is not None and self.proc.stderr is not None
        for stream, is_out in ((self.proc.stdout, True), (self.proc.stderr, False)):
            threading.Thread(target=self._pump, args=(stream, is_out), daemon=True).start()

    def _pump(self, stream: IO[bytes], is_out: bool) -> None:
        while data := stream.read1(1 << 16):  # type: ignore[attr-defined]
            self._chunks.put((data, b"") if is_out else (b"", data))
        self._chunks.put(None)

    def send(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def receive(self, timeout_s: float) -> tuple[bytes, bytes] | None:
        while True:
            try:
                chunk = self._chunks.get(timeout=timeout_s)
            except queue.Empty:
                return b"", b""
            if chunk is not None:
                return chunk
            self._open -= 1
            if self._open == 0:
                return None

    def returncode(self) -> int:
        return self.proc.wait()

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.close()  # type: ignore[union-attr]
