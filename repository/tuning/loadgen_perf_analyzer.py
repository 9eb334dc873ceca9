"""Drive a serving process with Triton's ``perf_analyzer``, not the built-in client. No Django.

The built-in client is Python: each request costs it a few hundred microseconds of CPU, taken
from the same cores the server under test runs on, so on a small machine it reads less throughput
and more latency than the server can give. perf_analyzer is C++ and costs a fraction of that, and
its numbers are the ones Triton users already compare against.

The version's request bodies become perf_analyzer's ``--input-data`` JSON at their fixed shape;
open loop is ``--request-rate-range R --request-distribution poisson``, closed loop is
``--concurrency-range C``; its ``-f`` CSV becomes a :class:`ClientAccount`.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import json
import math
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from repository.tuning.loadgen import ClientAccount, Shape

NAME = "perf_analyzer"
# perf_analyzer reports its last three measurement windows merged; the run's duration is split
# into three so the whole duration is measured.
WINDOWS = 3
# The duration is the user's, not perf_analyzer's stabilisation: any spread between windows is
# accepted (its default would keep measuring, up to ten windows, on a busy machine).
ANY_SPREAD = "10000"
# Start-up and model metadata on top of the measured windows, and a generous margin.
OVERHEAD_S = 120.0
POLL_S = 0.2
EMPTY_WINDOW = "No valid requests recorded within time interval"
PHASE_COLUMNS = {
    "queue": "Server Queue",
    "compute_input": "Server Compute Input",
    "compute_infer": "Server Compute Infer",
    "compute_output": "Server Compute Output",
}


class PerfAnalyzerError(RuntimeError):
    """perf_analyzer could not be started, failed, or wrote no report."""


class _EmptyWindowError(Exception):
    """No request finished within one of perf_analyzer's windows."""


def perf_analyzer_binary(configured: str) -> str | None:
    """The configured perf_analyzer, else one on PATH; None means the built-in client measures."""
    return configured or shutil.which(NAME)


def input_data(bodies: Sequence[bytes], *, batched: bool) -> tuple[dict[str, Any], int]:
    """perf_analyzer's ``--input-data`` document for these KServe v2 JSON infer bodies, and the
    batch size (``-b``) that keeps their shape.

    For a batching model every row of the batch dimension is one step (perf_analyzer stacks ``-b``
    consecutive steps into a request); otherwise each body is one step at its full shape.
    """
    steps: list[dict[str, Any]] = []
    batch = 1
    for number, body in enumerate(bodies):
        inputs = json.loads(body)["inputs"]
        if batched:
            batch = _batch_of(inputs, number)
            steps += [_step(inputs, row, batch) for row in range(batch)]
        else:
            steps.append(_step(inputs, 0, 1, keep_batch=True))
    if not steps:
        raise PerfAnalyzerError("no request bodies to give perf_analyzer")
    return {"data": steps}, batch


@dataclasses.dataclass(frozen=True)
class PerfAnalyzer:
    """perf_analyzer with a prepared input file; ``drive`` runs one load phase."""

    binary: str
    input_file: Path
    batch: int

    @classmethod
    def prepare(
        cls, binary: str, bodies: Sequence[bytes], *, batched: bool, folder: Path
    ) -> PerfAnalyzer:
        document, batch = input_data(bodies, batched=batched)
        path = folder / "perf_analyzer_input.json"
        path.write_text(json.dumps(document), encoding="utf-8")
        return cls(binary=binary, input_file=path, batch=batch)

    def command(
        self, *, url: str, model: str, version: int, shape: Shape, report: Path, stretch: int = 1
    ) -> list[str]:
        window_ms = max(1, round(stretch * shape.duration_s * 1000 / WINDOWS))
        if shape.mode == "rate":
            load = ["--request-rate-range", f"{shape.rate_per_s:g}:{shape.rate_per_s:g}",
                    "--request-distribution", "poisson"]  # fmt: skip
        else:
            load = ["--concurrency-range", f"{shape.concurrency}:{shape.concurrency}"]
        return [
            self.binary,
            "-m", model, "-x", str(version),
            "-u", url.removeprefix("http://"), "-i", "http",
            "--input-data", str(self.input_file), "-b", str(self.batch),
            *load,
            "--measurement-interval", str(window_ms),
            "--stability-percentage", ANY_SPREAD,
            "--max-trials", str(WINDOWS),
            "-f", str(report),
        ]  # fmt: skip

    def drive(
        self, *, url: str, model: str, version: int, shape: Shape, stop: threading.Event
    ) -> ClientAccount:
        """Run one phase to completion; a set ``stop`` kills perf_analyzer and returns an empty
        account (the caller discards a stopped run).

        A window in which no request finished (a stalled server, or a short window on a busy
        machine) is measured once more with windows as long as the whole duration.
        """
        try:
            return self._drive(url=url, model=model, version=version, shape=shape, stop=stop)
        except _EmptyWindowError:
            return self._drive(
                url=url, model=model, version=version, shape=shape, stop=stop, stretch=WINDOWS
            )

    def _drive(
        self,
        *,
        url: str,
        model: str,
        version: int,
        shape: Shape,
        stop: threading.Event,
        stretch: int = 1,
    ) -> ClientAccount:
        limit_s = stretch * shape.duration_s + OVERHEAD_S
        with tempfile.TemporaryDirectory(prefix="portico-perf-analyzer-") as name:
            report = Path(name) / "report.csv"
            command = self.command(
                url=url, model=model, version=version, shape=shape, report=report, stretch=stretch
            )
            with _started(command) as (process, output):
                finished = _wait(process, stop, limit_s)
                text = _read(output)
            if not finished:
                if stop.is_set():
                    return _stopped()
                raise PerfAnalyzerError(f"perf_analyzer did not finish within {limit_s:g} s")
            if process.returncode != 0:
                if stretch == 1 and EMPTY_WINDOW in text:
                    raise _EmptyWindowError
                raise PerfAnalyzerError(
                    f"perf_analyzer exited with {process.returncode}: {_last_lines(text)}"
                )
            if not report.exists():
                raise PerfAnalyzerError(f"perf_analyzer wrote no report: {_last_lines(text)}")
            return account_from_report(report.read_text(), text, batch=self.batch)


def account_from_report(report_csv: str, output: str, *, batch: int) -> ClientAccount:
    """perf_analyzer's ``-f`` CSV (microseconds, inferences per second) and its printed request
    count as a run's account (milliseconds, requests per second)."""
    rows = list(csv.DictReader(report_csv.splitlines()))
    if not rows:
        raise PerfAnalyzerError(f"perf_analyzer's report is empty: {_last_lines(output)}")
    row = rows[-1]
    throughput = float(row["Inferences/Second"]) / batch
    counts = re.findall(r"Request count: (\d+)", output)
    requests = int(counts[-1]) if counts else 0
    return ClientAccount(
        generator=NAME,
        requests=requests,
        errors=0,
        first_error="",
        elapsed_s=round(requests / throughput, 3) if throughput else 0.0,
        throughput_per_s=throughput,
        p50_ms=_ms(row, "p50 latency"),
        p95_ms=_ms(row, "p95 latency"),
        p99_ms=_ms(row, "p99 latency"),
        phases_ms={phase: _ms(row, column) for phase, column in PHASE_COLUMNS.items()},
    )


def _batch_of(inputs: Sequence[dict[str, Any]], number: int) -> int:
    sizes = {int(i["shape"][0]) for i in inputs if i.get("shape")}
    if len(sizes) != 1 or min(sizes) < 1:
        raise PerfAnalyzerError(f"request {number}: its inputs do not share one batch size")
    return sizes.pop()


def _step(
    inputs: Sequence[dict[str, Any]], row: int, batch: int, *, keep_batch: bool = False
) -> dict[str, Any]:
    step = {}
    for entry in inputs:
        shape = [int(d) for d in entry["shape"]]
        flat = _typed(entry.get("datatype", ""), _flatten(entry["data"]))
        per_row = len(flat) // batch
        step[entry["name"]] = {
            "content": flat[row * per_row : (row + 1) * per_row],
            "shape": shape if keep_batch else shape[1:],
        }
    return step


def _flatten(data: Any) -> list[Any]:
    """KServe v2 JSON allows nested (row-major) or flat data; perf_analyzer wants it flat."""
    if not isinstance(data, list):
        return [data]
    if not any(isinstance(d, list) for d in data):
        return data
    return [v for d in data for v in _flatten(d)]


def _typed(datatype: str, values: list[Any]) -> list[Any]:
    """perf_analyzer reads floats only as JSON floats (``0`` is refused for FP32), integers only
    as JSON integers."""
    if datatype.startswith(("FP", "BF")):
        return [float(v) for v in values]
    if datatype.startswith(("INT", "UINT")):
        return [int(v) for v in values]
    if datatype == "BOOL":
        return [bool(v) for v in values]
    return values


@contextlib.contextmanager
def _started(command: list[str]) -> Iterator[tuple[subprocess.Popen[bytes], IO[bytes]]]:
    # NOTE: output goes to a file, not a pipe: a pipe nobody reads while it runs would stall it.
    with tempfile.TemporaryFile() as output:
        try:
            process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:
            raise PerfAnalyzerError(f"cannot run perf_analyzer at {command[0]}: {exc}") from exc
        try:
            yield process, output
        finally:
            _kill(process)


def _wait(process: subprocess.Popen[bytes], stop: threading.Event, limit_s: float) -> bool:
    """True when it exited by itself; False when stopped or out of time (it is then killed)."""
    deadline = time.monotonic() + limit_s
    while not stop.is_set() and time.monotonic() < deadline:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=POLL_S)
            return True
    _kill(process)
    return False


def _kill(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        # Its own process group: a wrapper script that some installs use goes with it.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def _read(output: IO[bytes]) -> str:
    output.seek(0)
    return output.read().decode(errors="replace")


def _last_lines(text: str, count: int = 3) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return " | ".join(lines[-count:]) or "no output"


def _ms(row: dict[str, str], column: str) -> float:
    value = float(row.get(column) or 0) / 1000.0
    return value if math.isfinite(value) else 0.0


def _stopped() -> ClientAccount:
    return ClientAccount(
        generator=NAME, requests=0, errors=0, first_error="stopped", elapsed_s=0.0,
        throughput_per_s=0.0, p50_ms=0.0, p95_ms=0.0, p99_ms=0.0,
    )  # fmt: skip
