"""`python -m bench.inference_auth [--quick]`: what the inference token check costs.

One Triton folder (the identity model and the batching MLP) served in registry mode's request path
with inference auth off and on, in alternating rounds (the order flips every round so drift hits
both alike). "On" is the real access layer (ASGI middleware and gRPC interceptor) with a token
that has quotas, so the rate and concurrency bookkeeping is measured too; only the table's origin
differs from production (a fixed table here, the registry's there, which costs nothing per
request). perf_analyzer sends the token as ``authorization: Bearer KEY`` (an HTTP header and gRPC
metadata) in both modes, so only the server's check differs. Beside latency and throughput it
records the server's CPU per request, and the check alone (``bench.access_check``), which hold on a
busy machine where the others do not. Writes the "inference-auth" section of docs/benchmarks.md.

`python -m bench.inference_auth serve DIR --auth on|off --http-port N --grpc-port M` is the
server each round starts.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import signal
import statistics
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench import access_check, cost, perf_analyzer, report
from bench.server import _running, free_ports

KEY = "bench-inference-key-0123456789abcdefghijklmnop"
MLP_BATCHING = "dynamic_batching { max_queue_delay_microseconds: 500 }"
MLP_CONCURRENCY = 32


def serve(repository: Path, *, auth: bool, http_port: int, grpc_port: int) -> None:
    import uvloop

    from serving.access.table import AccessTable, TokenGrant, key_hash
    from serving.main import run_server
    from serving.settings import ServingSettings
    from serving.sources.directory import DirectorySource

    class FixedTokens(DirectorySource):
        """The folder's models, and one token that may call all of them (with quotas)."""

        def set_access_guard(self, guard: Any) -> None:
            grant = TokenGrant(
                token_id=1, prefix=KEY[:8], key_hash=key_hash(KEY), models=None, may_infer=True,
                rate_limit_rps=1e9, max_concurrency=1_000_000,
            )  # fmt: skip
            guard.replace(AccessTable.of(1, [grant]))

    folder = ServingSettings(model_repository=repository, host="127.0.0.1", http_port=http_port,
                             grpc_port=grpc_port, metrics_port=-1)  # fmt: skip
    settings = dataclasses.replace(
        folder, model_repository=None, inference_auth="required" if auth else "off"
    )

    async def run() -> None:
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        await run_server(settings, FixedTokens(folder), stop=stop)

    uvloop.run(run())


@contextlib.contextmanager
def server(repository: Path, *, auth: bool) -> Iterator[dict[str, str]]:
    http_port, grpc_port = free_ports(2)
    command = [sys.executable, "-m", "bench.inference_auth", "serve", str(repository),
               "--auth", "on" if auth else "off",
               "--http-port", str(http_port), "--grpc-port", str(grpc_port)]  # fmt: skip
    with _running(command, http_port, 120) as pid:
        yield {"http": f"127.0.0.1:{http_port}", "grpc": f"127.0.0.1:{grpc_port}", "pid": str(pid)}


def measure(addresses: dict[str, str], *, quick: bool) -> dict[str, Any]:
    # NOTE: the key is sent in both modes (a server with auth off ignores it): perf_analyzer's
    # gRPC client is itself slower with per-request metadata, and that is not the check's cost.
    header = ("-H", f"authorization:Bearer {KEY}")
    window_ms = 2000 if quick else 4000
    results: dict[tuple[str, str], Any] = {}
    for protocol in ("http", "grpc"):
        with _server_cpu(addresses, "identity") as cpu:
            results[("identity p50 µs", protocol)] = perf_analyzer.run_load(
                model="identity", protocol=protocol, url=addresses[protocol], concurrency=1,
                shape="INPUT0:16", measurement_ms=window_ms, extra_args=header,
            )  # fmt: skip
        results[("identity server CPU µs/request", protocol)] = cpu
        with _server_cpu(addresses, "mlp") as cpu:
            results[("mlp infer/s", protocol)] = perf_analyzer.run_load(
                model="mlp", protocol=protocol, url=addresses[protocol],
                concurrency=MLP_CONCURRENCY, measurement_ms=window_ms, extra_args=header,
            )  # fmt: skip
        results[("mlp server CPU µs/request", protocol)] = cpu
    return results


@dataclasses.dataclass
class ServerCpu:
    """Server CPU per request over one load run: unlike throughput, it holds on a busy machine,
    where other processes take the cores but not this process's work per request."""

    per_request_us: float = 0.0


@contextlib.contextmanager
def _server_cpu(addresses: dict[str, str], model: str) -> Iterator[ServerCpu]:
    pid, headers = int(addresses["pid"]), {"Authorization": f"Bearer {KEY}"}
    result = ServerCpu()
    before, cpu = cost.counts(addresses["http"], model, headers)[0], cost.tree_cpu_s(pid)
    yield result
    requests = cost.counts(addresses["http"], model, headers)[0] - before
    result.per_request_us = (cost.tree_cpu_s(pid) - cpu) / max(1, requests) * 1e6


def suite(*, quick: bool) -> None:
    from bench.__main__ import MLP_CONFIG, _demo_models

    demo_models = _demo_models()
    rounds = 1 if quick else 3
    runs: dict[bool, list[dict[str, Any]]] = {False: [], True: []}
    with tempfile.TemporaryDirectory() as folder:
        repo = Path(folder)
        demo_models.write_onnx_identity(repo, name="identity", dtype="FP32", max_batch_size=8)
        demo_models.write_onnx_mlp(repo, name="mlp", max_batch_size=64)
        (repo / "mlp" / "config.pbtxt").write_text(
            MLP_CONFIG.format(instances=1, batching=MLP_BATCHING)
        )
        for index in range(rounds):
            for auth in (False, True) if index % 2 == 0 else (True, False):
                with server(repo, auth=auth) as addresses:
                    runs[auth].append(measure(addresses, quick=quick))
    _write(runs, rounds)


def _value(metric: str, result: Any) -> float:
    if isinstance(result, ServerCpu):
        return result.per_request_us
    return float(result.p50_us if metric.endswith("µs") else result.throughput_per_s)


def _write(runs: dict[bool, list[dict[str, Any]]], rounds: int) -> None:
    rows = []
    for metric, protocol in runs[False][0]:
        off = statistics.median(_value(metric, r[(metric, protocol)]) for r in runs[False])
        on = statistics.median(_value(metric, r[(metric, protocol)]) for r in runs[True])
        added = (on - off) / off if "µs" in metric else (off - on) / off
        marks = [
            report.mark_any([r[(metric, protocol)] for r in runs[auth]]) for auth in (False, True)
        ]
        rows.append([metric, protocol.upper(), f"{off:.0f}{marks[0]}", f"{on:.0f}{marks[1]}",
                     f"{added * 100:+.1f} %"])  # fmt: skip
    everything = [result for mode in runs.values() for run in mode for result in run.values()
                  if not isinstance(result, ServerCpu)]  # fmt: skip
    alone = access_check.per_request_us(KEY)
    shares = []
    for protocol in ("http", "grpc"):
        for model in ("identity", "mlp"):
            metric = (f"{model} server CPU µs/request", protocol)
            off = statistics.median(_value(metric[0], r[metric]) for r in runs[False])
            shares.append(f"{alone[protocol] / off * 100:.1f} % of {model}'s {off:.0f} µs "
                          f"over {protocol.upper()}")  # fmt: skip
    body = "\n\n".join([
        "### Inference auth: the token check, off vs on",
        report.machine_line(),
        report.table(["measure", "protocol", "auth off", "auth on", "cost of the check"], rows),
        f"Median of {rounds} alternating round(s); identity at concurrency 1 ([1,16] FP32), MLP "
        f"with dynamic batching at concurrency {MLP_CONCURRENCY}. Cost is the p50 or server CPU "
        "per request added, or the throughput lost, as a share of auth off (negative: within "
        "noise, auth on measured faster). Server CPU per request (the server's CPU time over the "
        "requests its statistics counted) is the figure to trust on a busy machine; latency and "
        "throughput move with whatever else runs.",
        f"The check alone (`bench/access_check.py`: the HTTP middleware and the gRPC wrapper "
        f"around a handler that does nothing, best of {access_check.REPEATS} × "
        f"{access_check.CALLS:,} calls): {alone['http']:.1f} µs per HTTP request and "
        f"{alone['grpc']:.1f} µs per gRPC request, that is " + ", ".join(shares) + " (the "
        "server CPU per request with auth off above).",
        report.unstable_note(everything),
        "Reproduce: `PERF_ANALYZER=/path/to/perf_analyzer python -m bench.inference_auth`",
    ])  # fmt: skip
    report.write_section("inference-auth", body)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.inference_auth")
    commands = parser.add_subparsers(dest="command")
    run = commands.add_parser("run", help="measure and write docs/benchmarks.md (the default)")
    run.add_argument("--quick", action="store_true")
    serve_cmd = commands.add_parser("serve", help="one round's server")
    serve_cmd.add_argument("repository", type=Path)
    serve_cmd.add_argument("--auth", choices=("on", "off"), required=True)
    serve_cmd.add_argument("--http-port", type=int, required=True)
    serve_cmd.add_argument("--grpc-port", type=int, required=True)
    args = parser.parse_args(argv or ["run"])
    if args.command == "serve":
        serve(args.repository, auth=args.auth == "on", http_port=args.http_port,
              grpc_port=args.grpc_port)  # fmt: skip
    else:
        suite(quick=args.quick)
        print(f"wrote {report.BENCHMARKS_MD}")


if __name__ == "__main__":
    main(sys.argv[1:] if sys.argv[1:] != ["--quick"] else ["run", "--quick"])
