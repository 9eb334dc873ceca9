"""`python -m bench.device_standin [--baseline DIR] [--rounds N] [--quick]`: a device-like model
behind the dynamic batcher, where the time between two batches is the instance's idle time.

The model is a Python model that sleeps ``EXECUTE_MS`` per batch, whatever the batch holds: like
a GPU model, its run holds neither a CPU nor Python's interpreter lock in the server, so under
load the instance is what limits throughput and any wait between two batches is lost device
time. 64 clients keep four batches' worth of requests in flight (max batch 16, delay 0), so a
next batch is always queued when one ends.

It is served from this tree and, when given, from a second tree (e.g. `git worktree add
../before main`), in alternating rounds, and driven over HTTP and gRPC. Beside throughput and p50
it reports the statistics' ``compute_input``: the time from a batch leaving the queue to its run
starting on the instance's thread. Writes the "device-standin" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import textwrap
import urllib.request
from pathlib import Path
from typing import Any

import orjson

from bench import perf_analyzer, report
from bench.server import ROOT, serving

EXECUTE_MS = 1
CONCURRENCY = 64
MODEL = "standin"
CONFIG = """name: "standin"
backend: "python"
max_batch_size: 16
input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [16] }]
output [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [16] }]
instance_group [{ kind: KIND_CPU count: 1 }]
dynamic_batching { max_queue_delay_microseconds: 0 }
"""
MODEL_PY = textwrap.dedent(f'''\
    """A stand-in for a device model: {EXECUTE_MS} ms per batch, whatever its size."""
    import time

    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        def execute(self, requests):
            time.sleep({EXECUTE_MS} / 1000)
            return [
                pb_utils.InferenceResponse([pb_utils.Tensor(
                    "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())])
                for r in requests
            ]
''')


def write_model(repo: Path) -> None:
    (repo / MODEL / "1").mkdir(parents=True)
    (repo / MODEL / "config.pbtxt").write_text(CONFIG)
    (repo / MODEL / "1" / "model.py").write_text(MODEL_PY)


def _compute_input(http: str) -> tuple[int, int]:
    """(count, ns) of the statistics' compute_input so far."""
    with urllib.request.urlopen(f"http://{http}/v2/models/{MODEL}/stats", timeout=5) as reply:
        stats = orjson.loads(reply.read())["model_stats"][0]["inference_stats"]["compute_input"]
    return int(stats["count"]), int(stats["ns"])


def measure(addresses: dict[str, str], protocol: str, *, quick: bool) -> dict[str, Any]:
    before = _compute_input(addresses["http"])
    load = perf_analyzer.run_load(
        model=MODEL, protocol=protocol, url=addresses[protocol], concurrency=CONCURRENCY,
        measurement_ms=2000 if quick else 4000,
    )  # fmt: skip
    after = _compute_input(addresses["http"])
    handoff_us = (after[1] - before[1]) / max(1, after[0] - before[0]) / 1000
    return {"load": load, "handoff_us": handoff_us}


def suite(*, baseline: Path | None, rounds: int, quick: bool) -> None:
    trees = {"this tree": ROOT, **({"baseline": baseline} if baseline else {})}
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory() as folder:
        repo = Path(folder)
        write_model(repo)
        for index in range(rounds):
            # NOTE: the order flips every round so that drift hits every tree alike.
            order = list(trees) if index % 2 == 0 else list(reversed(trees))
            for label in order:
                with serving(repo, root=trees[label]) as addresses:
                    for protocol in ("http", "grpc"):
                        runs.setdefault((label, protocol), []).append(
                            measure(addresses, protocol, quick=quick)
                        )
    _write(runs, rounds, baseline)


def _write(
    runs: dict[tuple[str, str], list[dict[str, Any]]], rounds: int, baseline: Path | None
) -> None:
    rows = []
    for (label, protocol), measured in runs.items():
        loads = [m["load"] for m in measured]
        throughputs = [load.throughput_per_s for load in loads]
        rows.append([
            label, protocol.upper(),
            f"{statistics.median(throughputs):.0f}{report.mark_any(loads)}",
            f"{statistics.median(load.p50_us for load in loads):.0f}",
            f"{statistics.median(m['handoff_us'] for m in measured):.0f}",
            " / ".join(f"{t:.0f}" for t in throughputs),
        ])  # fmt: skip
    everything = [m["load"] for measured in runs.values() for m in measured]
    body = "\n\n".join([
        f"### A device-like model: {EXECUTE_MS} ms per batch off the CPU, concurrency "
        f"{CONCURRENCY}",
        report.machine_line(),
        report.table(
            ["tree", "protocol", "infer/s", "p50 µs", "queue exit → run start µs",
             "infer/s, each round"],
            rows,
        ),
        f"A Python model that sleeps {EXECUTE_MS} ms per batch (max batch 16, dynamic batching "
        f"with delay 0, one instance), {CONCURRENCY} clients sending batch-1 requests, median of "
        f"{rounds} alternating round(s)"
        + (f"; the baseline tree is at `{report.tree_commit(baseline)}`" if baseline else "")
        + ". \"Queue exit → run start\" is the statistics' `compute_input`: how long a batch "
        "waited between leaving the queue and starting on the instance's thread.",
        report.unstable_note(everything),
        "Reproduce: `PERF_ANALYZER=/path/to/perf_analyzer python -m bench.device_standin "
        "[--baseline ../before]`",
    ])  # fmt: skip
    report.write_section("device-standin", body)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.device_standin")
    parser.add_argument("--baseline", type=Path, help="another tree to measure beside this one")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="shorter windows, one round")
    args = parser.parse_args(argv)
    suite(baseline=args.baseline, rounds=1 if args.quick else args.rounds, quick=args.quick)
    print(f"wrote {report.BENCHMARKS_MD}")


if __name__ == "__main__":
    main(sys.argv[1:])
