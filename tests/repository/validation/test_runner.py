"""The check child process: steps streamed as they come, the report read from its pipe, the
environment allow-listed, wall-clock and memory limits enforced, inside the sandbox or not."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from repository.config.child_env import allowed
from repository.sandbox import SandboxUnavailableError
from repository.validation.runner import CheckInput, CheckLimits, check_command, run_check

pytestmark = pytest.mark.embedded

GENEROUS = CheckLimits(time_limit_s=60, memory_limit_bytes=4 * 1024**3)
SLEEPER_MARKER = "4242.5"  # the leftover process's sleep argument: unique enough to find it


@pytest.fixture
def check(settings, tmp_path: Path, monkeypatch) -> CheckInput:  # type: ignore[no-untyped-def]
    settings.PORTICO_VALIDATION_CHECK_MODULE = "tests.repository.validation.fake_check"
    version_dir = tmp_path / "input" / "repo" / "m" / "1"
    version_dir.mkdir(parents=True)
    (version_dir / "model.onnx").write_bytes(b"w")
    return CheckInput(
        input_dir=tmp_path / "input", model_dir=version_dir.parent, version_dir=version_dir
    )


@pytest.fixture(params=["bwrap", "off"])
def sandbox_mode(request, settings) -> str:  # type: ignore[no-untyped-def]
    settings.PORTICO_VALIDATION_SANDBOX = request.param
    return str(request.param)


def test_steps_are_delivered_as_they_are_printed_and_the_report_read(  # type: ignore[no-untyped-def]
    check: CheckInput, sandbox_mode: str, monkeypatch
) -> None:
    monkeypatch.setenv("FAKE_CHECK", "stream")
    seen: list[tuple[str, float]] = []
    started = time.monotonic()
    outcome = run_check(
        check,
        limits=GENEROUS,
        on_step=lambda s: seen.append((s["name"], time.monotonic() - started)),
    )
    assert [name for name, _ in seen] == ["load", "io"]
    # Streamed, not delivered at exit (printed a second apart; half of it left to a slow read).
    assert seen[1][1] - seen[0][1] > 0.5
    assert outcome.report == {"ok": True, "config_text": "x"}
    assert outcome.returncode == 0 and not outcome.timed_out


def test_the_check_sees_only_allow_listed_variables(  # type: ignore[no-untyped-def]
    check: CheckInput, sandbox_mode: str, settings, monkeypatch
) -> None:
    monkeypatch.setenv("FAKE_CHECK", "env")
    for name in ("SECRET_KEY", "DATABASE_URL", "REDIS_URL", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "leaked")
    outcome = run_check(check, limits=GENEROUS, on_step=lambda s: None)
    assert outcome.report is not None
    env = outcome.report["env"]
    assert "leaked" not in env.values()
    passed = set(settings.PORTICO_VALIDATION_SANDBOX_PASS_ENV)
    extra = {name for name in env if not allowed(name)} - passed
    assert extra <= {"HOME", "PYTHONPATH", "PYTHONNOUSERSITE", "PWD"}, extra  # PWD: bwrap --chdir


def test_time_limit_kills_the_child_and_every_process_it_started(  # type: ignore[no-untyped-def]
    check: CheckInput, settings, monkeypatch
) -> None:
    settings.PORTICO_VALIDATION_SANDBOX = "bwrap"
    monkeypatch.setenv("FAKE_CHECK", "sleeper")
    monkeypatch.setenv("FAKE_CHECK_SLEEP_S", SLEEPER_MARKER)
    outcome = run_check(
        check, limits=CheckLimits(time_limit_s=3, memory_limit_bytes=0), on_step=lambda s: None
    )
    assert outcome.timed_out and outcome.report is None
    assert "time limit" in outcome.failure_reason()
    # The leftover started its own session: only the PID namespace takes it down with the check.
    deadline = time.monotonic() + 10
    while processes_with(SLEEPER_MARKER) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_with(SLEEPER_MARKER) == []


def processes_with(marker: str) -> list[int]:
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if marker.encode() in cmdline:
            pids.append(int(proc.name))
    return pids


def test_memory_limit_stops_a_child_that_allocates_too_much(  # type: ignore[no-untyped-def]
    check: CheckInput, sandbox_mode: str, monkeypatch
) -> None:
    monkeypatch.setenv("FAKE_CHECK", "allocate")
    outcome = run_check(
        check,
        limits=CheckLimits(time_limit_s=30, memory_limit_bytes=512 * 1024**2),
        on_step=lambda s: None,
    )
    assert outcome.returncode != 0
    assert "MemoryError" in outcome.stderr_tail
    assert "MemoryError" in outcome.failure_reason()


def test_the_process_limit_holds_for_everything_the_check_starts(  # type: ignore[no-untyped-def]
    check: CheckInput, settings, monkeypatch
) -> None:
    # As root the kernel ignores RLIMIT_NPROC; the check's own cgroup must then hold the line.
    settings.PORTICO_VALIDATION_SANDBOX = "bwrap"
    monkeypatch.setenv("FAKE_CHECK", "forks")
    limits = CheckLimits(time_limit_s=60, memory_limit_bytes=0, max_processes=24)
    outcome = run_check(check, limits=limits, on_step=lambda s: None)
    assert outcome.report is not None
    assert 0 < outcome.report["forked"] < 24


def test_a_check_killed_by_a_signal_is_reported_as_such(  # type: ignore[no-untyped-def]
    check: CheckInput, sandbox_mode: str, monkeypatch
) -> None:
    monkeypatch.setenv("FAKE_CHECK", "killed")
    outcome = run_check(check, limits=GENEROUS, on_step=lambda s: None)
    assert outcome.report is None
    assert "killed by SIGKILL" in outcome.failure_reason()


def test_a_missing_bwrap_fails_closed_saying_how_to_fix_it(  # type: ignore[no-untyped-def]
    check: CheckInput, settings, tmp_path: Path, monkeypatch
) -> None:
    settings.PORTICO_VALIDATION_SANDBOX = "bwrap"
    settings.PORTICO_VALIDATION_BWRAP_PATH = str(tmp_path / "no-such-bwrap")
    monkeypatch.setenv("FAKE_CHECK", "ok")
    with pytest.raises(SandboxUnavailableError) as raised:
        run_check(check, limits=GENEROUS, on_step=lambda s: None)
    assert "no-such-bwrap" in raised.value.message
    assert "install bubblewrap" in raised.value.message.lower()


def test_a_misspelt_mode_keeps_the_sandbox_on(settings) -> None:  # type: ignore[no-untyped-def]
    from repository.sandbox import SandboxPolicy

    settings.PORTICO_VALIDATION_SANDBOX = "of"
    assert SandboxPolicy.from_settings().enabled


def test_check_command_passes_the_documented_flags(settings) -> None:  # type: ignore[no-untyped-def]
    settings.PORTICO_VALIDATION_CHECK_MODULE = "serving.check"
    cmd = check_command(
        model_dir="/in/m", version_dir="/in/m/1", config_file="/in/c", golden_file=None,
        report_file="/dev/fd/5",
    )  # fmt: skip
    assert cmd[1:3] == ["-m", "serving.check"]
    args: dict[str, Any] = dict(zip(cmd[3::2], cmd[4::2], strict=True))
    assert set(args) == {"--model-dir", "--version-dir", "--report", "--config"}
    assert json.dumps(args)  # plain strings
