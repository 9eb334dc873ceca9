"""The check child process: steps streamed as they come, wall-clock and memory limits enforced."""

from __future__ import annotations

import json
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from repository.validation.runner import CheckLimits, check_command, run_check

pytestmark = pytest.mark.embedded

GENEROUS = CheckLimits(time_limit_s=60, memory_limit_bytes=4 * 1024**3)


def script(tmp_path: Path, body: str) -> list[str]:
    path = tmp_path / "fake_check.py"
    path.write_text(textwrap.dedent(body))
    return [sys.executable, str(path)]


def test_steps_are_delivered_as_they_are_printed_and_the_report_read(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    cmd = script(
        tmp_path,
        f"""
        import json, time
        for name in ("load", "io"):
            print(json.dumps({{"name": name, "status": "passed", "message": "", "duration_ms": 1}}),
                  flush=True)
            time.sleep(0.3)
        print("a stray print from model code", flush=True)
        open({str(report)!r}, "w").write(json.dumps({{"ok": True, "config_text": "x"}}))
    """,
    )
    seen: list[tuple[str, float]] = []
    started = time.monotonic()
    outcome = run_check(
        cmd,
        report_file=report,
        limits=GENEROUS,
        on_step=lambda s: seen.append((s["name"], time.monotonic() - started)),
    )
    assert [name for name, _ in seen] == ["load", "io"]
    assert seen[1][1] - seen[0][1] > 0.2  # streamed, not delivered at exit
    assert outcome.report == {"ok": True, "config_text": "x"}
    assert outcome.returncode == 0 and not outcome.timed_out


def test_time_limit_kills_the_child_and_its_children(tmp_path: Path) -> None:
    pid_file = tmp_path / "grandchild.pid"
    cmd = script(
        tmp_path,
        f"""
        import subprocess, sys, time
        p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        open({str(pid_file)!r}, "w").write(str(p.pid))
        time.sleep(60)
    """,
    )
    started = time.monotonic()
    outcome = run_check(
        cmd,
        report_file=tmp_path / "none.json",
        limits=CheckLimits(time_limit_s=2, memory_limit_bytes=0),
        on_step=lambda s: None,
    )
    assert time.monotonic() - started < 15
    assert outcome.timed_out and outcome.report is None
    assert "time limit" in outcome.failure_reason()
    grandchild = int(pid_file.read_text())
    time.sleep(0.2)
    assert not Path(f"/proc/{grandchild}").exists() or "Z" in _proc_state(grandchild)


def _proc_state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2]
    except OSError:
        return "Z"


def test_memory_limit_stops_a_child_that_allocates_too_much(tmp_path: Path) -> None:
    cmd = script(
        tmp_path,
        """
        data = bytearray(1024 * 1024 * 1024)
        print("allocated")
    """,
    )
    outcome = run_check(
        cmd,
        report_file=tmp_path / "none.json",
        limits=CheckLimits(time_limit_s=30, memory_limit_bytes=512 * 1024**2),
        on_step=lambda s: None,
    )
    assert outcome.returncode != 0
    assert "MemoryError" in outcome.stderr_tail
    assert "MemoryError" in outcome.failure_reason()


def test_check_command_passes_the_documented_flags(tmp_path: Path) -> None:
    cmd = check_command(
        model_dir=tmp_path / "m",
        version_dir=tmp_path / "m" / "1",
        config_file=tmp_path / "c.pbtxt",
        golden_file=None,
        report_file=tmp_path / "r.json",
    )
    assert cmd[1:3] == ["-m", "serving.check"]
    args: dict[str, Any] = dict(zip(cmd[3::2], cmd[4::2], strict=True))
    assert set(args) == {"--model-dir", "--version-dir", "--report", "--config"}
    assert json.dumps(args)  # plain strings
