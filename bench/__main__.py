"""`python -m bench [protocol|batching|all] [--quick]`: served numbers beside raw ONNX Runtime.

`python -m bench peers [--rounds N]`: Portico beside MLServer and PyTriton (``bench.peers``).
`python -m bench cost [--baseline DIR]`: server CPU per request and mean batch (``bench.cost``).

Each suite starts its own serving process on a generated Triton folder, drives it with
perf_analyzer over HTTP and gRPC, measures raw in-process ONNX Runtime on the same model file in
the same run, and rewrites its section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import django

from bench import perf_analyzer, raw_onnx, report
from bench.server import serving, transport_floor

MLP_CONFIG = """
name: "mlp"
platform: "onnxruntime_onnx"
max_batch_size: 64
input [{{ name: "INPUT0" data_type: TYPE_FP32 dims: [256] }}]
output [{{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [16] }}]
instance_group [{{ kind: KIND_CPU count: {instances} }}]
{batching}
"""


def _demo_models():  # type: ignore[no-untyped-def]
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings.local")
    django.setup()
    from repository import demo_models

    return demo_models


def protocol_suite(*, quick: bool) -> None:
    """Identity model at concurrency 1 over HTTP (binary) and gRPC, beside the transport floor
    (an echo model on the same HTTP and gRPC stacks) and raw ONNX Runtime."""
    demo_models = _demo_models()
    rounds = 1 if quick else 3
    with tempfile.TemporaryDirectory() as folder:
        repo = Path(folder)
        demo_models.write_onnx_identity(repo, name="identity", dtype="FP32", max_batch_size=8)
        model_file = repo / "identity" / "1" / "model.onnx"
        raw = raw_onnx.measure(model_file, batch_size=1, seconds=2 if quick else 5)
        served: dict[str, list[perf_analyzer.LoadResult]] = {"http": [], "grpc": []}
        floor: dict[str, list[perf_analyzer.LoadResult]] = {"http": [], "grpc": []}
        # NOTE: rounds alternate Portico and the floor so that a noisy spell hits both alike.
        for _ in range(rounds):
            for target, results in ((serving(repo), served), (transport_floor(), floor)):
                with target as addresses:
                    for protocol in ("http", "grpc"):
                        results[protocol].append(perf_analyzer.run_load(
                            model="identity", protocol=protocol, url=addresses[protocol],
                            concurrency=1, shape="INPUT0:16",
                            measurement_ms=2000 if quick else 4000,
                        ))  # fmt: skip
    rows = []
    for protocol in ("http", "grpc"):
        ours, base = _median_run(served[protocol]), _median_run(floor[protocol])
        rows.append([
            protocol.upper(), f"{ours.p50_us:.0f}", f"{base.p50_us:.0f}",
            f"{ours.p50_us - base.p50_us:.0f}", f"{ours.p99_us:.0f}",
            f"{ours.throughput_per_s:.0f}{report.mark(ours)}", f"{raw.p50_us:.0f}",
            f"{ours.throughput_per_s / raw.inferences_per_s:.3f}",
        ])  # fmt: skip
    everything = [r for results in (*served.values(), *floor.values()) for r in results]
    body = "\n\n".join([
        "### Request path: identity model (FP32 [1,16]), concurrency 1",
        report.machine_line(),
        report.table(
            ["protocol", "served p50 µs", "floor p50 µs", "Portico adds µs", "served p99 µs",
             "served infer/s", "raw ORT p50 µs", "served ÷ raw ORT throughput"],
            rows,
        ),
        f"Median of {rounds} alternating round(s). The floor is `bench/transport_floor.py`: an "
        "echo model on stock uvicorn (its httptools protocol, uvloop, a raw ASGI app) and stock "
        "grpc.aio, with no scheduler, backend or statistics: what a server built plainly on "
        "these libraries costs on this machine. Portico's HTTP listener runs its own, cheaper "
        "connection protocol on httptools, so the floor is a reference, not a bound; "
        "\"Portico adds\" is served minus floor.",
        report.unstable_note(everything),
        "Reproduce: `PERF_ANALYZER=/path/to/perf_analyzer python -m bench protocol`",
    ])  # fmt: skip
    report.write_section("protocol", body)


def _median_run(results: list[perf_analyzer.LoadResult]) -> perf_analyzer.LoadResult:
    return sorted(results, key=lambda r: r.p50_us)[len(results) // 2]


BATCHING_VARIANTS = {
    "off": "",
    "delay 0 µs": "dynamic_batching { max_queue_delay_microseconds: 0 }",
    "delay 500 µs": "dynamic_batching { max_queue_delay_microseconds: 500 }",
    "delay 2 ms": "dynamic_batching { max_queue_delay_microseconds: 2000 }",
}


def batching_suite(*, quick: bool) -> None:
    """MLP 256→1024→1024→16 with batch-1 requests, batching off vs queue delays, HTTP and gRPC."""
    demo_models = _demo_models()
    concurrencies = (1, 32) if quick else (1, 8, 32, 64)
    seconds = 2 if quick else 5
    rows = []
    results: list[perf_analyzer.LoadResult] = []
    mean_batches: list[float] = []
    with tempfile.TemporaryDirectory() as folder:
        repo = Path(folder)
        demo_models.write_onnx_mlp(repo, name="mlp", max_batch_size=64)
        model_file = repo / "mlp" / "1" / "model.onnx"
        raw_1 = raw_onnx.measure(model_file, batch_size=1, seconds=seconds)
        for label, batching in BATCHING_VARIANTS.items():
            (repo / "mlp" / "config.pbtxt").write_text(
                MLP_CONFIG.format(instances=1, batching=batching)
            )
            with serving(repo) as addresses:
                for protocol in ("http", "grpc"):
                    for concurrency in concurrencies:
                        before = _batch_counts(addresses["http"])
                        result = perf_analyzer.run_load(
                            model="mlp",
                            protocol=protocol,
                            url=addresses[protocol],
                            concurrency=concurrency,
                            measurement_ms=2000 if quick else 4000,
                        )
                        mean_batch = _mean_batch(before, _batch_counts(addresses["http"]))
                        mean_batches.append(mean_batch)
                        results.append(result)
                        rows.append(
                            [
                                label,
                                protocol.upper(),
                                str(concurrency),
                                f"{result.throughput_per_s:.0f}{report.mark(result)}",
                                f"{result.p50_us / 1000:.2f}",
                                f"{result.p95_us / 1000:.2f}",
                                f"{result.p99_us / 1000:.2f}",
                                f"{result.queue_us:.0f}",
                                f"{mean_batch:.1f}",
                                f"{result.throughput_per_s / raw_1.inferences_per_s:.2f}",
                            ]
                        )
        formed = max(1, round(max(mean_batches)))
        raw_formed = raw_onnx.measure(model_file, batch_size=formed, seconds=seconds)
    body = "\n\n".join(
        [
            "### Dynamic batching: MLP 256→1024→1024→16 FP32, batch-1 requests",
            report.machine_line(),
            report.table(
                [
                    "batching",
                    "protocol",
                    "concurrency",
                    "infer/s",
                    "p50 ms",
                    "p95 ms",
                    "p99 ms",
                    "mean queue µs",
                    "mean batch",
                    "÷ raw ORT batch 1",
                ],
                rows,
            ),
            report.table(
                ["raw ONNX Runtime, in-process, one calling thread", "infer/s", "p50 µs"],
                [
                    ["batch 1", f"{raw_1.inferences_per_s:.0f}", f"{raw_1.p50_us:.0f}"],
                    [
                        f"batch {formed} (largest mean batch the server formed)",
                        f"{raw_formed.inferences_per_s:.0f}",
                        f"{raw_formed.p50_us:.0f}",
                    ],
                ],
            ),
            report.unstable_note(results),
            "Reproduce: `PERF_ANALYZER=/path/to/perf_analyzer python -m bench batching`",
        ]
    )
    report.write_section("batching", body)


def _batch_counts(http_address: str) -> tuple[int, int]:
    """(inferences, executions) of the mlp model so far, from the statistics extension."""
    import urllib.request

    import orjson

    with urllib.request.urlopen(f"http://{http_address}/v2/models/mlp/stats", timeout=5) as reply:
        stats = orjson.loads(reply.read())["model_stats"][0]
    return int(stats["inference_count"]), int(stats["execution_count"])


def _mean_batch(before: tuple[int, int], after: tuple[int, int]) -> float:
    executions = after[1] - before[1]
    return (after[0] - before[0]) / executions if executions else 1.0


SUITES = {"protocol": protocol_suite, "batching": batching_suite}


def main(argv: list[str]) -> None:
    if argv[:1] in (["peers"], ["cost"]):
        # NOTE: their own arguments; imported here so that the other suites do not need them.
        from bench import cost, peers

        {"peers": peers.main, "cost": cost.main}[argv[0]](argv[1:])
        print(f"wrote {report.BENCHMARKS_MD}")
        return
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("suite", nargs="?", default="all", choices=[*SUITES, "all"])
    parser.add_argument("--quick", action="store_true", help="shorter windows, fewer points")
    args = parser.parse_args(argv)
    for name, suite in SUITES.items():
        if args.suite in (name, "all"):
            print(f"running the {name} suite...", flush=True)
            suite(quick=args.quick)
    print(f"wrote {report.BENCHMARKS_MD}")


if __name__ == "__main__":
    main(sys.argv[1:])
