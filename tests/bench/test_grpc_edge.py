"""The gRPC edge benchmark drives the real HTTP/2 listener and counts only calls answered OK."""

import pytest

from bench import grpc_edge

pytestmark = pytest.mark.embedded


def test_the_listener_answers_every_call_of_each_batch() -> None:
    assert grpc_edge.measure_edge(2) > 0


def test_a_batch_the_listener_refuses_stops_the_measurement() -> None:
    with pytest.raises(RuntimeError, match=f"0 of {grpc_edge.BATCH} calls answered OK"):
        grpc_edge.measure_edge(1, path=b"/inference.GRPCInferenceService/NoSuchMethod")


def test_the_library_alone_answers_every_call() -> None:
    assert grpc_edge.measure_library(2) > 0
