"""The byte protocol between a worker and a check that runs elsewhere (its own pod): one bundle in,
framed steps and one framed report out. Pure standard library: the worker and serving both use it.

In: the header line ``portico-check-bundle/1 <nonce> <size>`` and then exactly ``size`` bytes of an
uncompressed tar (the version's files, the worker's config and golden requests, and ``check.json``
naming which is which). The size comes first so the check never waits for an end of file that a
container's attached stdin may not deliver.

Out, on stdout: lines ``portico-check/1 <nonce> step <json>`` and one ``portico-check/1 <nonce>
report <json>``. The check moves model code's stdout to stderr before it loads anything, and the
nonce comes from the worker, so log lines and prints are not mistaken for frames; a second report
frame makes the whole output untrusted. The report is still only the model's claim: the worker
re-checks it as it re-checks the bubblewrap child's.
"""

from __future__ import annotations

import json
import re
from typing import Any

BUNDLE_MAGIC = "portico-check-bundle/1"
FRAME_MAGIC = "portico-check/1"
MANIFEST_NAME = "check.json"
MAX_HEADER_BYTES = 256
# A step line is short; the report carries golden outputs and may be large, but not unbounded.
MAX_FRAME_BYTES = 256 * 1024**2
_NONCE = re.compile(r"[0-9a-f]{32}")


class WireError(ValueError):
    """A header or frame that does not follow the protocol."""


def bundle_header(nonce: str, size: int) -> bytes:
    if not _NONCE.fullmatch(nonce) or size < 0:
        raise WireError("a bundle header needs a 32-hex-digit nonce and a size")
    return f"{BUNDLE_MAGIC} {nonce} {size}\n".encode("ascii")


def parse_bundle_header(line: bytes) -> tuple[str, int]:
    """``(nonce, size)`` of a header line; ``WireError`` says what is wrong with it."""
    parts = line.decode("ascii", "replace").rstrip("\n").split(" ")
    if len(parts) != 3 or parts[0] != BUNDLE_MAGIC:
        raise WireError(f"not a {BUNDLE_MAGIC} header")
    nonce, size = parts[1], parts[2]
    if not _NONCE.fullmatch(nonce) or not size.isdigit():
        raise WireError("the bundle header needs a 32-hex-digit nonce and a decimal size")
    return nonce, int(size)


def frame(nonce: str, kind: str, payload: dict[str, Any]) -> bytes:
    """One output line; JSON escapes newlines, so a frame is always exactly one line."""
    return f"{FRAME_MAGIC} {nonce} {kind} {json.dumps(payload)}\n".encode()


class FrameReader:
    """Turns the check's stdout, fed in chunks of any size, into steps and one report.

    Lines without this run's prefix are ignored; a line longer than ``MAX_FRAME_BYTES`` or a second
    report marks the output ``spoiled``, and a spoiled output has no report.
    """

    def __init__(self, nonce: str) -> None:
        self._prefix = f"{FRAME_MAGIC} {nonce} ".encode("ascii")
        self._pending = bytearray()
        self._skipping = False  # inside an over-long line: drop bytes up to its end
        self._report: dict[str, Any] | None = None
        self.spoiled = False

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        """The steps completed by ``data``, in order."""
        steps: list[dict[str, Any]] = []
        self._pending += data
        while (end := self._pending.find(b"\n")) >= 0:
            line = bytes(self._pending[:end])
            del self._pending[: end + 1]
            if self._skipping:
                self._skipping = False
                continue
            steps += self._line(line)
        if len(self._pending) > MAX_FRAME_BYTES:
            self._mark_long()
        return steps

    @property
    def report(self) -> dict[str, Any] | None:
        return None if self.spoiled else self._report

    def _mark_long(self) -> None:
        if self._pending.startswith(self._prefix):
            self.spoiled = True
        self._pending.clear()
        self._skipping = True

    def _line(self, line: bytes) -> list[dict[str, Any]]:
        if not line.startswith(self._prefix):
            return []  # a stray print or log line
        kind, _, body = line[len(self._prefix) :].partition(b" ")
        try:
            payload = json.loads(body)
        except ValueError:
            self.spoiled = True
            return []
        if not isinstance(payload, dict):
            self.spoiled = True
            return []
        if kind == b"step":
            return [payload]
        if kind == b"report":
            if self._report is not None:
                self.spoiled = True
            self._report = payload
        return []
