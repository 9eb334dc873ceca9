"""A relayed answer sent in pieces waits while ``STREAM_WINDOW`` of them have not reached the
front-end's client (``DELIVERED``), an end marked ``UNTIL_DELIVERED`` while any has not, and
either stops waiting once that client has gone.

The whole path (a generate_stream client behind front-ends that stops reading) is in
``tests/serving/backends/python/test_decoupled_unread.py``; there the request's disconnect watch
cancels the handler while it awaits the model. Here the handler waits in ``send`` itself, as it
does for an ordinary answer of many pieces (``_send_pieces``), which no watch covers: without
the wake-up from ``disconnect`` it would wait for ever and keep its in-flight place.
"""

from __future__ import annotations

import asyncio

from serving.protocol.http import relay_wire as wire
from serving.protocol.http.disconnect import DisconnectWatch
from serving.protocol.http.relay import RelayedRequest
from serving.protocol.relay_frames import FrameReader


class FramesOut:
    """What the request sends towards the front-end, decoded: one kind per frame."""

    def __init__(self) -> None:
        self.kinds: list[int] = []
        self._reader = FrameReader(lambda call, kind, payload: self.kinds.append(kind))

    def __call__(self, data: bytes) -> None:
        self._reader.feed(data)


def _relayed() -> tuple[RelayedRequest, FramesOut]:
    out = FramesOut()
    return RelayedRequest(1, memoryview(b""), False, out, DisconnectWatch()), out


async def _send_pieces(request: RelayedRequest, count: int) -> None:
    await request.send({"type": "http.response.start", "status": 200, "headers": []})
    for _ in range(count):
        await request.send({"type": "http.response.body", "body": b"x", "more_body": True})
    await request.send({"type": "http.response.body", "body": b"", "more_body": False})


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_a_piece_past_the_window_waits_until_one_is_delivered() -> None:
    request, out = _relayed()
    sending = asyncio.create_task(_send_pieces(request, wire.STREAM_WINDOW + 1))
    await _settle()
    assert not sending.done()
    assert out.kinds.count(wire.BODY) == wire.STREAM_WINDOW
    request.delivered()
    await asyncio.wait_for(sending, 5)
    assert out.kinds.count(wire.BODY) == wire.STREAM_WINDOW + 1 and out.kinds[-1] == wire.END


async def test_an_end_marked_until_delivered_waits_for_every_piece_to_reach_the_client() -> None:
    """What an answer counted in the budget until it has gone ends with (``_send_pieces``)."""
    request, out = _relayed()
    await request.send({"type": "http.response.start", "status": 200, "headers": []})
    for _ in range(2):
        await request.send({"type": "http.response.body", "body": b"x", "more_body": True})
    end = {"type": "http.response.body", "body": b"", wire.UNTIL_DELIVERED: True}
    ending = asyncio.create_task(request.send(end))
    await _settle()
    assert not ending.done() and wire.END not in out.kinds
    request.delivered()
    await _settle()
    assert not ending.done()
    request.delivered()
    await asyncio.wait_for(ending, 5)
    assert out.kinds[-1] == wire.END

    request, out = _relayed()  # and it too stops waiting once the client has gone
    await request.send({"type": "http.response.start", "status": 200, "headers": []})
    await request.send({"type": "http.response.body", "body": b"x", "more_body": True})
    ending = asyncio.create_task(request.send(end))
    await _settle()
    request.disconnect()
    await asyncio.wait_for(ending, 5)
    assert wire.END not in out.kinds


async def test_a_send_waiting_for_room_ends_when_the_client_goes() -> None:
    request, out = _relayed()
    sending = asyncio.create_task(_send_pieces(request, wire.STREAM_WINDOW + 10))
    await _settle()
    assert not sending.done()
    request.disconnect()
    await asyncio.wait_for(sending, 5)  # returned: nobody is left to read the rest
    assert out.kinds.count(wire.BODY) == wire.STREAM_WINDOW and wire.END not in out.kinds
    request.finish()  # after the app returns: nothing more goes to a client that left
    assert wire.END not in out.kinds
