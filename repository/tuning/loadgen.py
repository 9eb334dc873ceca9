"""Drive a serving process over HTTP: open-loop Poisson arrivals at a rate, or closed-loop clients
at a concurrency, for a duration. Pure asyncio and aiohttp; no Django.

Open-loop latency counts from when a request was *due*, not from when the client got round to
sending it, so a stalled server cannot hide its queue by slowing the client (coordinated omission).
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import threading
import time
from collections.abc import Sequence

import aiohttp
import numpy as np

# Open loop: requests beyond this many in flight are counted as errors instead of being sent, so
# an overloaded server cannot make the generator grow without bound.
MAX_OUTSTANDING = 2048
REQUEST_TIMEOUT_S = 30.0
# The name each run's result gives its generator (``perf_analyzer`` for the other one).
BUILT_IN = "built-in"


@dataclasses.dataclass(frozen=True)
class Shape:
    """How hard to push: ``mode`` is ``"rate"`` (Poisson at ``rate_per_s``) or ``"concurrency"``."""

    mode: str
    duration_s: float
    rate_per_s: float = 0.0
    concurrency: int = 1

    def describe(self) -> str:
        if self.mode == "rate":
            return f"{self.rate_per_s:g} req/s"
        return f"concurrency {self.concurrency}"


@dataclasses.dataclass
class Samples:
    """What the client saw: latencies of successful requests, error count, wall time measured."""

    latencies_s: list[float] = dataclasses.field(default_factory=list)
    errors: int = 0
    first_error: str = ""
    elapsed_s: float = 0.0

    def fail(self, reason: str) -> None:
        self.errors += 1
        self.first_error = self.first_error or reason


@dataclasses.dataclass(frozen=True)
class ClientAccount:
    """One run as a load generator saw it; latencies in ms, throughput in requests per second.

    ``phases_ms`` is the generator's own report of the server's queue and compute phases (mean ms
    per request), or None when the run's numbers come from the server's statistics instead.
    """

    generator: str
    requests: int
    errors: int
    first_error: str
    elapsed_s: float
    throughput_per_s: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    phases_ms: dict[str, float] | None = None


def account_of(samples: Samples) -> ClientAccount:
    """The built-in client's samples summed up."""
    latencies_ms = np.asarray(samples.latencies_s, dtype=np.float64) * 1000.0
    p50, p95, p99 = (
        (float(v) for v in np.percentile(latencies_ms, [50, 95, 99]))
        if latencies_ms.size
        else (0.0, 0.0, 0.0)
    )
    elapsed = samples.elapsed_s
    return ClientAccount(
        generator=BUILT_IN,
        requests=latencies_ms.size + samples.errors,
        errors=samples.errors,
        first_error=samples.first_error,
        elapsed_s=elapsed,
        throughput_per_s=latencies_ms.size / elapsed if elapsed else 0.0,
        p50_ms=p50,
        p95_ms=p95,
        p99_ms=p99,
    )


@dataclasses.dataclass(frozen=True)
class Target:
    """Where requests go: the server's base URL, the infer path and the request bodies (JSON)."""

    url: str
    path: str
    bodies: Sequence[bytes]


def drive(target: Target, shape: Shape, *, stop: threading.Event, seed: int = 0) -> Samples:
    """Run one load phase to completion on a fresh event loop (call it off the caller's loop)."""
    return asyncio.run(_drive(target, shape, stop, seed))


async def _drive(target: Target, shape: Shape, stop: threading.Event, seed: int) -> Samples:
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
    samples = Samples()
    async with aiohttp.ClientSession(target.url, connector=connector, timeout=timeout) as session:
        started = time.perf_counter()
        if shape.mode == "rate":
            await _open_loop(session, target, shape, stop, samples, random.Random(seed))
        else:
            await _closed_loop(session, target, shape, stop, samples)
        samples.elapsed_s = time.perf_counter() - started
    return samples


async def _one(
    session: aiohttp.ClientSession, target: Target, body: bytes, due: float, samples: Samples
) -> None:
    try:
        headers = {"Content-Type": "application/json"}
        async with session.post(target.path, data=body, headers=headers) as response:
            payload = await response.read()
            if response.status != 200:
                samples.fail(f"HTTP {response.status}: {payload[:200].decode(errors='replace')}")
                return
    except (aiohttp.ClientError, TimeoutError) as exc:
        samples.fail(f"{type(exc).__name__}: {exc}")
        return
    samples.latencies_s.append(time.perf_counter() - due)


async def _open_loop(
    session: aiohttp.ClientSession,
    target: Target,
    shape: Shape,
    stop: threading.Event,
    samples: Samples,
    rng: random.Random,
) -> None:
    start = time.perf_counter()
    due, sent = start, 0
    in_flight: set[asyncio.Task[None]] = set()
    while not stop.is_set():
        due += rng.expovariate(shape.rate_per_s)
        if due - start >= shape.duration_s:
            break
        wait_s = due - time.perf_counter()
        if wait_s > 0:
            await asyncio.sleep(wait_s)
        if len(in_flight) >= MAX_OUTSTANDING:
            samples.fail("client backlog full: the server is far behind the arrival rate")
            continue
        body = target.bodies[sent % len(target.bodies)]
        task = asyncio.create_task(_one(session, target, body, due, samples))
        in_flight.add(task)
        task.add_done_callback(in_flight.discard)
        sent += 1
    if in_flight:
        await asyncio.gather(*in_flight)


async def _closed_loop(
    session: aiohttp.ClientSession,
    target: Target,
    shape: Shape,
    stop: threading.Event,
    samples: Samples,
) -> None:
    deadline = time.perf_counter() + shape.duration_s

    async def client(index: int) -> None:
        sent = index
        while not stop.is_set() and time.perf_counter() < deadline:
            body = target.bodies[sent % len(target.bodies)]
            await _one(session, target, body, time.perf_counter(), samples)
            sent += shape.concurrency

    await asyncio.gather(*(client(i) for i in range(shape.concurrency)))
