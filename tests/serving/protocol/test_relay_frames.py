"""The front-end socket's framing (``serving.protocol.relay_frames``): whatever pieces the
socket delivers the bytes in, the reader hands on the same frames, each once and in order."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

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


@given(st.binary(max_size=200), st.binary(max_size=200))
def test_a_unary_payload_splits_back_into_its_header_and_body(header: bytes, body: bytes) -> None:
    head, rest = split_unary(unary_payload(header, body))
    assert bytes(head) == header and bytes(rest) == body
