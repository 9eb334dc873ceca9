"""The collector against real HTTP replicas serving the real live-stats code, and the dashboard
WebSocket consumer that carries its frames to browsers."""

from __future__ import annotations

import asyncio
import dataclasses
import http.server
import socket
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import Group, User

from console.collector.runner import Collector, reset_collector
from serving.core.statistics import ModelStatistics
from serving.observability.live_stats import live_stats_json

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.embedded]

ORIGIN = [(b"origin", b"http://127.0.0.1")]


@dataclasses.dataclass
class _Scheduler:
    queue_depth: int = 0
    in_flight: int = 0


@dataclasses.dataclass
class _Version:
    statistics: ModelStatistics
    scheduler: _Scheduler = dataclasses.field(default_factory=_Scheduler)
    state: str = "READY"


class _Replica:
    """A real HTTP server answering GET /v2/portico/live-stats with the serving code's JSON."""

    def __init__(self, *stats: ModelStatistics) -> None:
        versions = [_Version(s) for s in stats]
        served = type("Served", (), {"loaded_versions": lambda self: versions})()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                body = live_stats_json(served)
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _succeed(stats: ModelStatistics, n: int, total_ms: float) -> None:
    for _ in range(n):
        stats.record_success(
            total_ns=int(total_ms * 1e6),
            queue_ns=0,
            compute_input_ns=0,
            compute_infer_ns=int(total_ms * 1e6),
            compute_output_ns=0,
        )


@pytest.fixture(autouse=True)
async def _channel_layer_closed(settings: Any) -> Any:
    """A group of this test's own (parallel tests share one Redis); and the Redis layer and the
    publish lease keep per-loop connections: close them with the loop."""
    settings.PORTICO_DASHBOARD_GROUP = f"dashboards-test-{uuid.uuid4().hex[:12]}"
    yield
    await reset_collector()
    await _close_layer()


@pytest.fixture
def replicas() -> Iterator[list[_Replica]]:
    started: list[_Replica] = []
    yield started
    for replica in started:
        replica.close()


def _heartbeat(replica_id: str, url: str) -> None:
    from repository.services.replicas import replica_heartbeat

    replica_heartbeat(
        replica_id=replica_id,
        address=replica_id,
        http_url=url,
        started_at=datetime.now(UTC),
        versions=[],
        last_error="",
    )


async def test_collector_merges_heartbeating_replicas_and_drops_a_dead_one(
    replicas: list[_Replica],
) -> None:
    from asgiref.sync import sync_to_async

    a, b = ModelStatistics("m", 1), ModelStatistics("m", 1)
    replicas += [_Replica(a), _Replica(b)]
    await sync_to_async(_heartbeat)("r1", replicas[0].url)
    await sync_to_async(_heartbeat)("r2", replicas[1].url)
    await sync_to_async(_heartbeat)("r3", f"http://127.0.0.1:{_free_port()}")
    collector = Collector()
    async with httpx.AsyncClient(timeout=0.5) as client:
        await collector.tick(client)
        await asyncio.sleep(1.0)
        _succeed(a, 30, 1.0)
        _succeed(b, 10, 50.0)
        frame = await collector.tick(client)
    await collector.stop()
    model = frame["models"]["m"]
    assert model["replicas_up"] == 2
    assert model["combined"]["requests_per_s"] == pytest.approx(40 / 1.0, rel=0.5)
    assert set(model["by_replica"]) == {"r1", "r2"}
    assert model["combined"]["latency_us"]["request"]["p99"] > 30_000
    assert {r["id"]: r["up"] for r in frame["replicas"]} == {"r1": True, "r2": True, "r3": False}
    assert "histograms" not in model["combined"]
    assert len(collector.history) == 2
    # the rolling store saw exact deltas: 40 requests between the two polls
    compare = collector.compare(*_whole_range("m"))
    assert compare["a"]["requests"] == 40


def _whole_range(model: str) -> tuple[Any, Any]:
    from console.collector.rolling import Selection

    now = datetime.now(UTC).timestamp()
    return Selection(model, None, now - 60, now + 5), Selection(model, 1, now - 60, now + 5)


async def test_promote_and_rollback_events_become_markers(replicas: list[_Replica]) -> None:
    from asgiref.sync import sync_to_async

    from repository.services.events import event_record

    replicas.append(_Replica(ModelStatistics("m", 1)))
    await sync_to_async(_heartbeat)("r1", replicas[0].url)
    collector = Collector()
    async with httpx.AsyncClient(timeout=0.5) as client:
        first = await collector.tick(client)
        await sync_to_async(event_record)(
            actor=None, action="promote", to_version=2, from_version=1
        )
        await sync_to_async(event_record)(actor=None, action="upload", to_version=3)
        second = await collector.tick(client)
        third = await collector.tick(client)
    await collector.stop()
    assert first["markers"] == []
    assert [(m["action"], m["version"], m["from_version"]) for m in second["markers"]] == [
        ("promote", 2, 1)
    ]
    assert third["markers"] == []
    assert len(collector.markers) == 1


async def test_consumer_sends_backfill_then_frames_and_answers_compare(
    replicas: list[_Replica], settings: Any
) -> None:
    from asgiref.sync import sync_to_async

    from console.asgi import application

    stats = ModelStatistics("m", 1)
    replicas.append(_Replica(stats))
    settings.PORTICO_DASHBOARD_REPLICA_URLS = [replicas[0].url]

    def viewer() -> User:
        user = User.objects.create_user("viewer", password="pw")
        user.groups.add(Group.objects.get_or_create(name="viewer")[0])
        return user

    user = await sync_to_async(viewer)()
    communicator = WebsocketCommunicator(application, "/ws/dashboards/?model=m", headers=ORIGIN)
    communicator.scope["user"] = user
    try:
        connected, _ = await communicator.connect()
        assert connected
        backfill = await communicator.receive_json_from(timeout=5)
        assert backfill["type"] == "backfill"
        assert (await communicator.receive_json_from(timeout=5))["type"] == "frame"
        _succeed(stats, 20, 2.0)  # after the first poll: the compare store sees all of them
        frames = [await communicator.receive_json_from(timeout=5) for _ in range(2)]
        assert all(f["type"] == "frame" for f in frames)
        assert list(frames[-1]["models"]) == ["m"]
        assert frames[-1]["models"]["m"]["replicas_up"] == 1
        assert "by_replica" in frames[-1]["models"]["m"]
        now = datetime.now(UTC).timestamp()
        side = {"version": "all", "start": now - 60, "end": now + 5}
        await communicator.send_json_to(
            {"type": "compare", "model": "m", "a": side, "b": {**side, "version": 1}}
        )
        while (reply := await communicator.receive_json_from(timeout=5))["type"] != "compare":
            pass
        assert reply["a"]["requests"] == 20
        assert reply["b"]["version"] == 1
    finally:
        await communicator.disconnect()


async def _close_layer() -> None:
    """The Redis layer keeps per-loop connection pools; close them before the test's loop ends."""
    layer = get_channel_layer()
    if hasattr(layer, "close_pools"):
        await layer.close_pools()


async def test_consumer_refuses_users_without_a_role() -> None:
    from asgiref.sync import sync_to_async

    from console.asgi import application

    user = await sync_to_async(User.objects.create_user)("nobody", password="pw")
    communicator = WebsocketCommunicator(application, "/ws/dashboards/", headers=ORIGIN)
    communicator.scope["user"] = user
    connected, code = await communicator.connect()
    assert not connected or code == 4403
    await communicator.disconnect()
