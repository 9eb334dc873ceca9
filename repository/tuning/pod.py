"""``python -m repository.tuning.pod --bundle-stdin --scratch DIR``: one served config of a load
test or tuning in a pod of its own (``PORTICO_LOADTEST_RUNNER=kubernetes``). No Django.

In, on stdin: the check's bundle (``repository.config.check_wire``, unpacked by the same safe
code): the version's files, the config to serve, and as the "golden" file ``{"model", "version",
"bodies"}`` (the request bodies to send, base64). Then one frame per run: ``{"run": <Shape>}``.
Out, framed on stdout: ``{"event": "ready"}`` once the private server answers, then per run
``{"event": "result", "result": <RunResult>}`` or ``{"event": "error", "message": ...}``.

The server listens on the pod's loopback and the load is generated beside it, so the pod needs no
network at all; the runs use the worker's own ``measure``. The worker's end of stdin closing ends
the server and the pod; a cancel deletes the Job.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import json
import sys
import threading
from pathlib import Path
from typing import IO, Any

from repository.config.bundle_unpack import (
    BundleRefused,
    bundle_header_read,
    bundle_receive,
    frame_writer,
    private_stdout,
)
from repository.config.check_wire import MAX_HEADER_BYTES, FrameReader
from repository.tuning.launcher import private_server
from repository.tuning.loadgen import Shape, Target
from repository.tuning.measure import measure

CONFIG_NAME = "config.pbtxt"
DEFAULT_MAX_BUNDLE_BYTES = 8 * 1024**3
DEFAULT_STARTUP_TIMEOUT_S = 300.0


def pod_main(
    stdin: IO[bytes], out: IO[bytes], *, scratch: Path, max_bytes: int, startup_timeout_s: float
) -> int:
    """Serve the bundled version and measure each run asked for until stdin ends; 0 then, 1 when
    the bundle was refused or the server never came up, 2 when the input is not a bundle."""
    header = bundle_header_read(stdin, program="repository.tuning.pod")
    if header is None:
        return 2
    nonce, size = header
    emit = frame_writer(out, nonce)
    try:
        _, manifest = bundle_receive(stdin, size, scratch, max_bytes=max_bytes)
        job = _job(manifest["golden"])
        model_dir, config = manifest["model_dir"], manifest["config"]
        assert model_dir is not None
        if config is not None:  # the served config replaces whatever the version's folder holds
            (model_dir / CONFIG_NAME).write_bytes(config.read_bytes())
    except BundleRefused as refused:
        emit({"event": "error", "message": str(refused)})
        return 1
    try:
        with private_server(model_dir.parent, startup_timeout_s=startup_timeout_s) as server:
            emit({"event": "ready"})
            target = Target(
                url=server.url,
                path=f"/v2/models/{job['model']}/versions/{job['version']}/infer",
                bodies=job["bodies"],
            )
            for shape in _runs(stdin, nonce):
                result = measure(
                    server,
                    target,
                    shape,
                    model=job["model"],
                    version=job["version"],
                    stop=threading.Event(),  # a cancelled run ends with the pod
                )
                emit({"event": "result", "result": result.as_dict()})
    except RuntimeError as error:
        emit({"event": "error", "message": str(error)})
        return 1
    return 0


def _job(path: Path | None) -> dict[str, Any]:
    """What to send: the model, its version number and the request bodies."""
    try:
        data = json.loads(path.read_text(encoding="utf-8")) if path is not None else None
        return {
            "model": str(data["model"]),
            "version": int(data["version"]),
            "bodies": [base64.b64decode(b, validate=True) for b in data["bodies"]],
        }
    except (OSError, ValueError, TypeError, KeyError) as error:
        raise BundleRefused(f"the load test's description is unreadable: {error!r}") from None


def _runs(stdin: IO[bytes], nonce: str) -> Any:
    """Each run's shape, as the worker's frames arrive; ends with stdin."""
    reader = FrameReader(nonce)
    shape_fields = {f.name for f in dataclasses.fields(Shape)}
    while line := stdin.readline(MAX_HEADER_BYTES * 16):
        for request in reader.feed(line):
            run = request.get("run")
            if isinstance(run, dict) and set(run) <= shape_fields:
                yield Shape(**run)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m repository.tuning.pod")
    parser.add_argument("--bundle-stdin", action="store_true", required=True)
    parser.add_argument("--scratch", type=Path, required=True)
    parser.add_argument("--max-bundle-bytes", type=int, default=DEFAULT_MAX_BUNDLE_BYTES)
    parser.add_argument("--startup-timeout-s", type=float, default=DEFAULT_STARTUP_TIMEOUT_S)
    args = parser.parse_args(argv)
    out = private_stdout()
    return pod_main(
        sys.stdin.buffer,
        out,
        scratch=args.scratch,
        max_bytes=args.max_bundle_bytes,
        startup_timeout_s=args.startup_timeout_s,
    )


if __name__ == "__main__":
    sys.exit(main())
