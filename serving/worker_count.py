"""``--workers auto``, the ``serve`` command's default: how many front-end processes per protocol
this host's cores leave room for once the serving process and the loaded models have theirs.

The serving process keeps one core for its loop (scheduling, and the relay's frames). The models'
CPU instances claim the intra-op threads they were placed with, but at most half the host: by
default an ONNX Runtime or PyTorch instance is given every core (cores ÷ instances), and counting
that in full would leave no front-end on any CPU host, while their threads are busy only while a
batch runs. What is left is shared by the two protocols, up to ``MAX_AUTO_WORKERS`` each.

Below ``MIN_CORES_FOR_FRONTENDS`` usable cores the answer is 0: on 2 cores a front-end costs a lone
client 100-700 µs of p50, and its throughput at concurrency 32 came out from 0.92× to 1.6× the
in-process one across runs (docs/serving.md, "Front-end processes"; docs/benchmarks.md), so
everything stays in one process there. The count is taken once, after the start-up models have
loaded; models loaded later do not change it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from serving.backends.base import ModelInstance
    from serving.settings import ServingSettings

# The settings' value for "auto", resolved by ``resolve`` before anything listens. None rather
# than a number, so that a count left unresolved reads as 0 (in-process) and every negative
# number stays an error.
AUTO = None
AUTO_WORD = "auto"  # how flags and variables say it
MIN_CORES_FOR_FRONTENDS = 4
MAX_AUTO_WORKERS = 8  # the many-core run's largest N; past it the one scheduler is the bound
SERVING_LOOP_CORES = 1
GPU_KIND = "KIND_GPU"


def parse(text: str) -> int | str:
    """A ``--workers`` value as given: ``AUTO_WORD`` or a count of 0 or more (``settled``
    turns the word into ``AUTO`` once flags and variables have been weighed)."""
    word = text.strip().lower()
    if word == AUTO_WORD:
        return AUTO_WORD
    count = int(word)
    if count < 0:
        raise ValueError(f"expected 'auto' or a count of 0 or more, got '{text}'")
    return count


def settled(value: object) -> int | None:
    """A count as the settings keep it: ``AUTO`` for the word, else the count."""
    if value is AUTO or value == AUTO_WORD:
        return AUTO
    if not isinstance(value, int):
        raise TypeError(f"a front-end count is a number or '{AUTO_WORD}', not {value!r}")
    return value


def model_cores(instances: Iterable[ModelInstance]) -> int:
    """Cores the loaded CPU instances' runtimes may run on at once (GPU instances claim none)."""
    return sum(
        max(1, instance.placement.intra_op_threads)
        for instance in instances
        if instance.placement.kind != GPU_KIND
    )


def auto_workers(cores: int, claimed_by_models: int) -> int:
    """Front-end processes per protocol on ``cores`` usable cores."""
    if cores < MIN_CORES_FOR_FRONTENDS:
        return 0
    reserved = SERVING_LOOP_CORES + min(claimed_by_models, cores // 2)
    return max(0, min(MAX_AUTO_WORKERS, (cores - reserved) // 2))


def resolve(
    settings: ServingSettings, instances: Iterable[ModelInstance]
) -> tuple[ServingSettings, str]:
    """``settings`` with every ``auto`` replaced by a count, and a line saying how it was chosen
    ("" when nothing was auto). A protocol served over TLS gets 0: front-ends hold no keys."""
    grpc_auto = settings.grpc_workers is AUTO
    http_auto = settings.http_workers is AUTO
    if not grpc_auto and not http_auto:
        return settings, ""
    cores = settings.effective_cpu_count
    claimed = model_cores(instances)
    count = auto_workers(cores, claimed)
    # Front-ends hold no keys, and past 4 GiB a relay frame's length does not fit.
    grpc = count if settings.fits_relay and not settings.grpc_tls else 0
    http = count if settings.fits_relay and not settings.http_tls else 0
    resolved = dataclasses.replace(
        settings,
        grpc_workers=grpc if grpc_auto else settings.grpc_workers,
        http_workers=http if http_auto else settings.http_workers,
    )
    why = (
        f"front-end processes (--workers auto): {resolved.grpc_workers} gRPC, "
        f"{resolved.http_workers} HTTP; {cores} usable cores, {claimed} claimed by the loaded "
        f"models' CPU instances"
    )
    return resolved, why
