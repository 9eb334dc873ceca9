"""``python -m bench.gpu.measure --until EPOCH``: the GPU benchmark, run inside the GPU venv.

For each generated model: raw in-process ONNX Runtime with the CUDA and the TensorRT provider at
a few batch sizes, then Portico serving the same file (KIND_GPU, dynamic batching) under batch-1
requests at concurrency 1 to 256; writes the GPU section of docs/benchmarks.md. Stops measuring
when ``--until`` comes and writes what it has, saying what it left out.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from bench import report
from bench.gpu import load, models, raw
from bench.server import serving

CONCURRENCY = (1, 4, 16, 64, 256)
PLANS = {  # model: (input shape, raw batch sizes, seconds per point)
    "mlp": ((256,), [1, 16, 64], 2.0),
    "resnet50": ((3, 224, 224), [1, 16, 64], 2.0),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--until", type=float, required=True, help="stop by this epoch time")
    args = parser.parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings.local")
    import django

    django.setup()
    sections, left_out = [], []
    with tempfile.TemporaryDirectory(prefix="portico-gpu-bench-") as folder:
        files = models.write_folder(Path(folder))
        with serving(Path(folder), startup_timeout_s=300) as addresses:
            for name, (shape, batches, seconds) in PLANS.items():
                if time.time() > args.until - 30:
                    left_out.append(name)
                    continue
                sections.append(
                    _model(name, files[name], shape, batches, seconds, addresses, args.until)
                )
    report.write_section("gpu", _body(sections, left_out))
    print(_body(sections, left_out))
    return 0


def _model(
    name: str,
    path: Path,
    shape: tuple[int, ...],
    batches: list[int],
    seconds: float,
    addresses: dict[str, str],
    until: float,
) -> str:
    raws = {p: raw.measure(path, p, batches, seconds) for p in (raw.CUDA, raw.TENSORRT)}
    served = []
    for concurrency in CONCURRENCY:
        if time.time() > until - 15:
            break
        served.append(
            load.run(
                addresses["grpc"],
                name,
                shape,
                concurrency,
                seconds,
                processes=min(8, os.cpu_count() or 1),
            )
        )
    best_raw = max(p.inferences_per_s for p in raws[raw.CUDA])
    best_served = max((p.inferences_per_s for p in served), default=0.0)
    knee = _knee(served)
    rows = [
        [
            f"raw ORT {provider.removesuffix('ExecutionProvider')}, batch {p.batch_size}",
            f"{p.inferences_per_s:,.0f}",
            "",
            f"{p.p99_ms:.2f}",
        ]
        for provider, points in raws.items()
        for p in points
    ]
    rows += [
        [
            f"Portico gRPC, concurrency {p.concurrency}",
            f"{p.inferences_per_s:,.0f}",
            f"{p.p50_ms:.2f}",
            f"{p.p99_ms:.2f}" + (f" ({p.errors} errors)" if p.errors else ""),
        ]
        for p in served
    ]
    ratio = best_served / best_raw if best_raw else 0.0
    summary = (
        f"Best served throughput {best_served:,.0f}/s = {ratio:.2f}x raw ORT CUDA at its best "
        f"batch size ({best_raw:,.0f}/s); target 0.7x. "
        + (
            f"Knee at concurrency {knee.concurrency}: p99 {knee.p99_ms:.2f} ms (target < 20 ms)."
            if knee
            else "No served point measured."
        )
    )
    table = report.table(["what", "inferences/s", "p50 ms", "p99 ms"], rows)
    return f"### {name}\n\n{summary}\n\n{table}"


def _knee(points: list[load.LoadPoint]) -> load.LoadPoint | None:
    """The lowest concurrency reaching 90 % of the best throughput."""
    if not points:
        return None
    best = max(p.inferences_per_s for p in points)
    return next(p for p in points if p.inferences_per_s >= 0.9 * best)


def _body(sections: list[str], left_out: list[str]) -> str:
    from bench.gpu.devices import device_line

    notes = f"\n\nLeft out for time: {', '.join(left_out)}." if left_out else ""
    return (
        "## GPU\n\n" + report.machine_line() + f" GPU: {device_line()}. Batch-1 requests over "
        "gRPC with dynamic batching (2 instances on GPU 0), generated models (the MLP "
        "256→1024→1024→16 and a ResNet-50-sized CNN), `make gpu-check`.\n\n"
        + "\n\n".join(sections)
        + notes
    )


if __name__ == "__main__":
    sys.exit(main())
