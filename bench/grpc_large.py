"""Large tensors over gRPC: ``ModelInfer`` and ``ModelStreamInfer`` read and written in place
(``infer_wire``) against protobuf's own parse and serialization.

`python -m bench.grpc_large [--baseline ../before] [--rounds 3]` measures, in this process, what
decoding a request and encoding its answer (unary, and as a stream's answer) costs at each size
both ways (the loop's time per request, best of the rounds). With ``--baseline`` (a tree from
before the change) it also runs perf_analyzer against both trees' servers in alternating rounds:
the identity model over gRPC at concurrency 4, 1 MiB and 16 MiB requests, unary and streamed.
Writes the "grpc-large" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import report
from bench.perf_analyzer import run_load
from bench.server import ROOT, serving

SIZES = (64, 64 * 1024, 1 << 20, 16 << 20)
LOAD_SIZES = (1 << 20, 16 << 20)
RPCS = {"ModelInfer": (), "ModelStreamInfer": ("--streaming",)}  # perf_analyzer's flags
CONCURRENCY = 4


def codec_rows(rounds: int) -> list[list[str]]:
    import numpy as np
    from tritonclient.grpc import service_pb2

    from serving.core.types import InferResponse
    from serving.protocol.grpc.infer_wire import (
        parse_infer_request,
        serialize_infer_response,
        serialize_stream_infer_response,
    )
    from serving.protocol.grpc_codec import decode_infer_request, encode_infer_response

    rows = []
    for size in SIZES:
        x = np.ones((1, size // 4), np.float32)
        message = service_pb2.ModelInferRequest(
            model_name="identity", raw_input_contents=[x.tobytes()]
        )
        message.inputs.add(name="INPUT0", datatype="FP32", shape=list(x.shape))
        wire = message.SerializeToString()
        answer = InferResponse(model_name="identity", model_version=1, outputs={"OUTPUT0": x})
        ways: dict[str, Callable[[], Any]] = {
            "decode protobuf": lambda w=wire: decode_infer_request(
                service_pb2.ModelInferRequest.FromString(w)
            ),
            "decode in place": lambda w=wire: decode_infer_request(parse_infer_request(w)),
            "encode protobuf": lambda a=answer: encode_infer_response(a).SerializeToString(),
            "encode in place": lambda a=answer: serialize_infer_response(
                encode_infer_response(a, in_place=True)
            ),
            "stream encode protobuf": lambda a=answer: service_pb2.ModelStreamInferResponse(
                infer_response=encode_infer_response(a)
            ).SerializeToString(),
            "stream encode in place": lambda a=answer: serialize_stream_infer_response(
                encode_infer_response(a, in_place=True)
            ),
        }
        calls = max(5, min(5000, (200 << 20) // max(size, 4096)))
        timings: dict[str, list[float]] = {way: [] for way in ways}
        for _ in range(rounds):  # NOTE: the ways alternate, so a slow moment hits them all
            for way, run in ways.items():
                timings[way].append(_per_call_us(run, calls))
        best = {way: min(times) for way, times in timings.items()}
        rows.append([_size(size), *(f"{best[way]:,.1f}" for way in ways)])
    return rows


def _per_call_us(run: Callable[[], Any], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        run()
    return (time.perf_counter() - start) / calls * 1e6


def _size(size: int) -> str:
    return (
        f"{size >> 20} MiB"
        if size >= 1 << 20
        else f"{size >> 10} KiB"
        if size >= 1024
        else f"{size} B"
    )


def load_rows(baseline: Path, rounds: int) -> list[list[str]]:
    from repository import demo_models as dm

    trees = {"this tree": ROOT, "baseline": baseline}
    measured: dict[tuple[str, str, int], list[float]] = {}
    with tempfile.TemporaryDirectory() as folder:
        repo = Path(folder)
        dm.write_onnx_identity(repo, "identity", dims=(-1,), max_batch_size=8)
        for _ in range(rounds):
            for label, root in trees.items():
                with serving(repo, root=root) as server:
                    for rpc, flags in RPCS.items():
                        for size in LOAD_SIZES:
                            result = run_load(model="identity", protocol="grpc",
                                              url=server["grpc"], concurrency=CONCURRENCY,
                                              shape=f"INPUT0:{size // 4}", measurement_ms=4000,
                                              extra_args=flags)  # fmt: skip
                            measured.setdefault((label, rpc, size), []).append(
                                result.throughput_per_s
                            )
    rows = []
    for rpc in RPCS:
        for size in LOAD_SIZES:
            new, old = (measured[(label, rpc, size)] for label in trees)
            rows.append([
                f"{rpc}, {_size(size)}",
                " / ".join(f"{v:,.1f}" for v in new),
                " / ".join(f"{v:,.1f}" for v in old),
                f"{statistics.median(new) / statistics.median(old):.2f}",
            ])  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.grpc_large", description=__doc__)
    parser.add_argument("--baseline", type=Path, help="a tree from before, for the load rounds")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    command = "python -m bench.grpc_large" + (" --baseline ../before" if args.baseline else "")
    parts = [
        "### Large tensors over gRPC: read and written in place, against protobuf's own codec",
        report.machine_line(
            "one process for the codec rows, the load generator beside the "
            "servers for the load rows"
        ),  # fmt: skip
        report.table(
            [
                "tensor",
                "decode µs, protobuf",
                "decode µs, in place",
                "encode µs, protobuf",
                "encode µs, in place",
                "stream encode µs, protobuf",
                "stream encode µs, in place",
            ],
            codec_rows(args.rounds),
        ),  # fmt: skip
        "What decoding one `ModelInfer` request (one FP32 tensor of that size) and encoding its "
        "answer (as a `ModelInfer` answer, and as a `ModelStreamInfer` one) cost the event loop, "
        "per request, best of "
        f"{args.rounds} rounds. In place, 64 KiB and below is protobuf's own codec (the walk "
        "starts at 128 KiB).",
    ]
    if args.baseline:
        parts += [
            report.table(
                [
                    "RPC, request and answer",
                    "infer/s, this tree",
                    "infer/s, baseline",
                    "ratio of medians",
                ],
                load_rows(args.baseline, args.rounds),
            ),  # fmt: skip
            f"perf_analyzer, identity over gRPC at concurrency {CONCURRENCY} (`--streaming` for "
            f"`ModelStreamInfer`), each round both "
            f"trees' servers one after the other; the baseline is at "
            f"`{report.tree_commit(args.baseline)}`.",
        ]
    parts.append(f"Reproduce: `{command} --rounds {args.rounds}`")
    report.write_section("grpc-large", "\n\n".join(parts))


if __name__ == "__main__":
    main()
