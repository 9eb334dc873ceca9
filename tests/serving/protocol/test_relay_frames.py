"""The front-end socket's framing (``serving.protocol.relay_frames``): whatever pieces the
socket delivers the bytes in, the reader hands on the same frames, each once and in order; and
what each protocol's relay encodes in them (``grpc.relay_wire``, ``http.relay_wire``) comes out
as it went in, whatever a client put there."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from serving.protocol.grpc import relay_wire as grpc_wire
from serving.protocol.http import relay_wire as http_wire
from serving.protocol.relay_frames import FrameReader, frame, split_unary, unary_payload

frames = st.lists(
    st.tuples(st.integers(0, 2**64 - 1), st.integers(0, 255), st.binary(max_size=300)),
    max_size=12,
)


@settings(max_examples=300, deadline=None)
@given(frames, st.lists(st.integers(0, 4000), max_size=20))
def test_frames_come_out_whole_wherever_the_bytes_are_cut(
    sent: list[tuple[int, int, bytes]], cuts: list[int]
) -> None:
    data = b"".join(frame(call, kind, payload) for call, kind, payload in sent)
    received: list[tuple[int, int, bytes]] = []
    reader = FrameReader(lambda call, kind, payload: received.append((call, kind, payload)))
    start = 0
    for cut in sorted(min(cut, len(data)) for cut in cuts) + [len(data)]:
        reader.feed(data[start:cut])
        start = cut
    assert received == sent


@settings(deadline=None)
@given(st.binary(max_size=200), st.binary(max_size=200))
def test_a_unary_payload_splits_back_into_its_header_and_body(header: bytes, body: bytes) -> None:
    head, rest = split_unary(unary_payload(header, body))
    assert bytes(head) == header and bytes(rest) == body


# Any text a client can put in a path or metadata, lone surrogates included (a percent-decoded
# path may hold them), and any bytes in a header.
texts = st.text(st.characters(codec=None, exclude_categories=()), max_size=40)
headers = st.lists(st.tuples(st.binary(max_size=30), st.binary(max_size=60)), max_size=6)


@settings(deadline=None)
@given(texts, texts, st.binary(max_size=40), st.binary(max_size=40), headers, st.booleans())
def test_an_http_head_crosses_the_socket_unchanged(
    method: str, path: str, raw_path: bytes, query: bytes, sent: list[Any], more: bool
) -> None:
    scope = {"method": method, "path": path, "raw_path": raw_path, "query_string": query,
             "headers": sent, "client": ("203.0.113.9", 50123), "server": ("127.0.0.1", 8000),
             "scheme": "http", "http_version": "1.1"}  # fmt: skip
    head = http_wire.decode_head(http_wire.encode_head(scope, more_body=more))
    assert (head.method, head.path, head.raw_path, head.query_string) == (
        method, path, raw_path, query,
    )  # fmt: skip
    assert head.headers == tuple(sent) and head.more_body is more
    assert head.client == ("203.0.113.9", 50123) and head.server == ("127.0.0.1", 8000)
    status, back = http_wire.decode_start(http_wire.encode_start(200, sent))
    assert status == 200 and back == tuple(sent)


metadata = st.lists(st.tuples(texts, st.one_of(texts, st.binary(max_size=40))), max_size=6)


@settings(deadline=None)
@given(texts, metadata, texts, st.one_of(st.none(), st.floats(0, 1e6)), st.integers(0, 16))
def test_a_grpc_header_and_status_cross_the_socket_unchanged(
    method: str, sent: list[Any], peer: str, timeout_s: float | None, code: int
) -> None:
    header = grpc_wire.encode_header(method, tuple(sent), peer, timeout_s)
    assert grpc_wire.decode_header(header) == (method, tuple(sent), peer, timeout_s)
    status = grpc_wire.encode_status(code, peer, sent)
    assert grpc_wire.decode_status(status) == (code, peer, tuple(sent))
