"""The check as a pod runs it: ``python -m serving.check --bundle-stdin`` as a real process, fed
the bundle the worker packs (files re-hashed against the registry) and answering in frames; hostile
bundles refused before anything is checked; the bubblewrap runner's limits and failure reasons."""

from __future__ import annotations

import hashlib
import io
import json
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

from repository import demo_models
from repository.config.check_wire import (
    FrameReader,
    bundle_header,
    frame,
)
from repository.errors import BlobIntegrityError
from repository.sandbox import CheckLimits
from repository.validation.runner import CheckInput
from repository.validation.streamed import bundle_for, run_streamed_check
from tests.repository.validation.local_transport import LocalCheckProcess

pytestmark = [pytest.mark.embedded, pytest.mark.timeout(300)]

GENEROUS = CheckLimits(time_limit_s=120, memory_limit_bytes=0)
MAX_BUNDLE = 64 * 1024**2
NONCE = "0123456789abcdef" * 2


def _check_input(
    tmp_path: Path, model_dir: Path, golden: list[dict[str, Any]] | None
) -> CheckInput:
    root = tmp_path / "input"
    files = tuple(
        (p.relative_to(root).as_posix(), hashlib.sha256(p.read_bytes()).hexdigest())
        for p in sorted(model_dir.rglob("*"))
        if p.is_file()
    )
    golden_file = None
    if golden is not None:
        golden_file = root / "golden.json"
        golden_file.write_text(json.dumps(golden))
    return CheckInput(
        input_dir=root,
        model_dir=model_dir,
        version_dir=model_dir / "1",
        golden_file=golden_file,
        files=files,
    )


def _run(check: CheckInput, tmp_path: Path, limits: CheckLimits = GENEROUS, **kw: Any):  # type: ignore[no-untyped-def]
    steps: list[dict[str, Any]] = []
    with bundle_for(check) as bundle:
        outcome = run_streamed_check(
            bundle,
            start=lambda: LocalCheckProcess(tmp_path / "pod", max_bundle_bytes=MAX_BUNDLE, **kw),
            limits=limits,
            on_step=steps.append,
        )
    return outcome, steps


def test_a_demo_model_is_checked_from_its_bundle_with_golden_requests(tmp_path: Path) -> None:
    model_dir = demo_models.write_onnx_add_sub(tmp_path / "input" / "repo", dtype="FP32", dims=(4,))
    inputs = [
        {"name": "INPUT0", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]},
        {"name": "INPUT1", "datatype": "FP32", "shape": [1, 4], "data": [1, 1, 1, 1]},
    ]
    check = _check_input(tmp_path, model_dir, [{"id": 7, "inputs": inputs}])
    outcome, steps = _run(check, tmp_path)
    assert outcome.returncode == 0 and not outcome.timed_out, outcome.stderr_tail
    report = outcome.report
    assert report is not None and report["ok"], report
    assert [s["name"] for s in steps] == ["config", "load", "io", "warmup", "golden"]
    assert report["golden"][0]["outputs"]["OUTPUT0"]["data"] == [2.0, 3.0, 4.0, 5.0]
    assert 'platform: "onnxruntime_onnx"' in report["config_text"]


def test_model_prints_and_forged_frames_do_not_become_the_report(tmp_path: Path) -> None:
    forged = frame(NONCE, "report", {"ok": True, "config_text": "forged"}).decode().strip()
    noisy = (
        "import os, sys\n"
        f"print({forged!r})\n"
        "os.write(1, b'raw noise on fd 1\\n')\n"
        "sys.stdout.flush()\n" + demo_models.PYTHON_ADD_SUB
    )
    model_dir = demo_models.write_python_model(
        tmp_path / "input" / "repo", "noisy", noisy, demo_models.PYTHON_ADD_SUB_CONFIG
    )
    outcome, steps = _run(_check_input(tmp_path, model_dir, None), tmp_path)
    assert outcome.report is not None and outcome.report["ok"], outcome.stderr_tail
    assert (
        outcome.report["config_text"] != "forged"
        and 'backend: "python"' in (outcome.report["config_text"])
    )
    assert "raw noise on fd 1" in outcome.stderr_tail  # the model's stdout went to stderr
    assert [s["name"] for s in steps][:2] == ["config", "load"]


def test_per_process_limits_apply_to_the_model_and_not_to_unpacking(tmp_path: Path) -> None:
    writer = (
        "import os, tempfile\n"
        "with open(os.path.join(tempfile.gettempdir(), 'big'), 'wb') as f:\n"
        "    f.write(b'x' * 200_000)\n" + demo_models.PYTHON_ADD_SUB
    )
    model_dir = demo_models.write_python_model(
        tmp_path / "input" / "repo", "writer", writer, demo_models.PYTHON_ADD_SUB_CONFIG
    )
    (model_dir / "1" / "weights.bin").write_bytes(b"w" * 300_000)  # over the limit, unpacked
    check = _check_input(tmp_path, model_dir, None)
    outcome, steps = _run(check, tmp_path, extra=("--rlimit=fsize=100000",))
    assert outcome.report is not None and not outcome.report["ok"], outcome.stderr_tail
    failed = [s for s in steps if s["status"] == "failed"]
    assert failed and "File too large" in failed[0]["message"], steps


def test_a_file_changed_after_it_left_the_blob_store_is_not_sent(tmp_path: Path) -> None:
    model_dir = demo_models.write_onnx_identity(tmp_path / "input" / "repo")
    check = _check_input(tmp_path, model_dir, None)
    (model_dir / "1" / "model.onnx").write_bytes(b"swapped")
    with pytest.raises(BlobIntegrityError):
        bundle_for(check)


def _tar(add: Any) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        add(tar)
    return buffer.getvalue()


def _file(tar: tarfile.TarFile, name: str, data: bytes = b"x") -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def _link(tar: tarfile.TarFile, name: str, target: str, kind: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    tar.addfile(info)


OUTSIDE_MANIFEST = json.dumps({"model_dir": "..", "version_dir": "/"}).encode()
HOSTILE = {
    "traversal": (lambda t: _file(t, "../../escaped"), "stay inside the bundle"),
    "absolute": (lambda t: _file(t, "/tmp/absolute-escape"), "stay inside the bundle"),
    "symlink": (lambda t: _link(t, "repo/m/1/model.onnx", "/etc/passwd", tarfile.SYMTYPE),
                "only plain files and folders"),
    "hardlink": (lambda t: _link(t, "repo/m/1/x", "/etc/passwd", tarfile.LNKTYPE),
                 "only plain files and folders"),
    "duplicate": (lambda t: (_file(t, "repo/a"), _file(t, "repo/a")), "appears twice"),
    "device": (lambda t: _link(t, "dev", "", tarfile.CHRTYPE), "only plain files and folders"),
    "not a tar": (None, "not a readable tar"),
    "no manifest": (lambda t: _file(t, "repo/m/1/model.onnx"), "check.json"),
    "manifest outside": (
        lambda t: _file(t, "check.json", OUTSIDE_MANIFEST),
        "not a path the bundle brought",
    ),
}  # fmt: skip


def _raw(tmp_path: Path, data: bytes) -> tuple[int, bytes, bytes]:
    """Send ``data`` as the whole of stdin; the exit status and all the process wrote."""
    process = LocalCheckProcess(tmp_path / "pod", max_bundle_bytes=MAX_BUNDLE)
    try:
        process.send(data)
        assert process.proc.stdin is not None
        process.proc.stdin.close()
        stdout, stderr = bytearray(), bytearray()
        while (chunk := process.receive(60)) is not None:
            stdout += chunk[0]
            stderr += chunk[1]
        return process.returncode(), bytes(stdout), bytes(stderr)
    finally:
        process.stop()


def _bundle(payload: bytes, *, size: int | None = None) -> bytes:
    return bundle_header(NONCE, len(payload) if size is None else size) + payload


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_bundles_are_refused_before_anything_is_checked(tmp_path: Path, case: str) -> None:
    add, reason = HOSTILE[case]
    payload = _tar(add) if add is not None else b"\x01" * 2048
    code, stdout, stderr = _raw(tmp_path, _bundle(payload))
    reader = FrameReader(NONCE)
    steps = reader.feed(stdout)
    report = reader.report
    assert code == 1 and report is not None and not report["ok"], stderr
    assert steps[0]["name"] == "bundle" and reason in steps[0]["message"], steps
    assert not (tmp_path / "escaped").exists() and not Path("/tmp/absolute-escape").exists()
    unpacked = list((tmp_path / "pod").rglob("*"))
    assert not [p for p in unpacked if p.is_symlink() or not (p.is_file() or p.is_dir())]


def test_an_oversize_bundle_is_refused_without_reading_it(tmp_path: Path) -> None:
    code, stdout, _ = _raw(tmp_path, _bundle(b"", size=MAX_BUNDLE + 1))
    reader = FrameReader(NONCE)
    (step,) = reader.feed(stdout)
    assert code == 1 and "over the limit" in step["message"]


def test_input_that_is_not_a_bundle_gets_no_report(tmp_path: Path) -> None:
    code, stdout, stderr = _raw(tmp_path, b"GET / HTTP/1.1\n")
    assert code == 2 and stdout == b""
    assert b"not a portico-check-bundle/1 header" in stderr


def test_a_check_that_outlives_its_limit_is_stopped_with_the_runners_reason(
    tmp_path: Path,
) -> None:
    model_dir = demo_models.write_onnx_identity(tmp_path / "input" / "repo")
    check = _check_input(tmp_path, model_dir, None)
    # A process that never answers stands for a check stuck in model code.
    sleeper = [sys.executable, "-c", "import time; time.sleep(600)"]
    outcome, _ = _run(
        check, tmp_path, CheckLimits(time_limit_s=2, memory_limit_bytes=0), argv=sleeper
    )
    assert outcome.timed_out and outcome.report is None
    assert outcome.failure_reason() == "the check ran past its time limit and was stopped"


def test_a_check_killed_by_a_signal_is_reported_as_the_runner_reports_it(tmp_path: Path) -> None:
    model_dir = demo_models.write_onnx_identity(tmp_path / "input" / "repo")
    check = _check_input(tmp_path, model_dir, None)
    killed = [sys.executable, "-c", "import os; os.kill(os.getpid(), 9)"]
    outcome, _ = _run(check, tmp_path, argv=killed)
    assert outcome.report is None and not outcome.timed_out
    assert "killed by SIGKILL" in outcome.failure_reason()


def test_frames_of_another_run_long_lines_and_a_second_report_are_not_trusted() -> None:
    reader = FrameReader(NONCE)
    other = frame("f" * 32, "report", {"ok": True})
    steps = reader.feed(
        b"log line\n" + other + frame(NONCE, "step", {"name": "a", "status": "passed"})
    )
    assert steps == [{"name": "a", "status": "passed"}] and reader.report is None
    half = frame(NONCE, "report", {"ok": False})
    reader.feed(half[:10])
    reader.feed(half[10:])
    assert reader.report == {"ok": False}
    reader.feed(frame(NONCE, "report", {"ok": True}))
    assert reader.spoiled and reader.report is None
