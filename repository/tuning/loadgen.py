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

# Open loop: requests beyond this many in flight are counted as errors instead of being sent, so
# an overloaded server cannot make the generator grow without bound.
MAX_OUTSTANDING = 2048
REQUEST_TIMEOUT_S = 30.0


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
