"""Per-user limits on unfinished browser uploads: how many sessions and how many declared bytes
one user may hold open; the chunk cap comes from settings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.urls import reverse

from console.uploads.sessions import (
    UploadSessionError,
    upload_session_append,
    upload_session_discard,
    upload_session_open,
)
from tests.console.views.conftest import signed_in


@pytest.fixture(autouse=True)
def small_limits(settings: Any, tmp_path: Path) -> None:
    settings.UPLOAD_DIR = tmp_path / "uploads"
    settings.PORTICO_UPLOAD_MAX_OPEN_SESSIONS = 2
    settings.PORTICO_UPLOAD_MAX_OPEN_BYTES = 1000
    settings.PORTICO_UPLOAD_CHUNK_MAX_BYTES = 100


def test_a_user_cannot_hold_more_open_sessions_than_the_limit() -> None:
    first = upload_session_open(user_id=1, path="a.onnx", size=10)
    upload_session_open(user_id=1, path="b.onnx", size=10)
    with pytest.raises(UploadSessionError) as refused:
        upload_session_open(user_id=1, path="c.onnx", size=10)
    assert refused.value.status == 429
    assert "2 unfinished uploads (the limit is 2)" in refused.value.message
    upload_session_open(user_id=2, path="c.onnx", size=10)  # someone else's allowance
    upload_session_discard(first)
    upload_session_open(user_id=1, path="c.onnx", size=10)


def test_a_user_cannot_declare_more_open_bytes_than_the_limit() -> None:
    upload_session_open(user_id=1, path="a.onnx", size=600)
    with pytest.raises(UploadSessionError) as refused:
        upload_session_open(user_id=1, path="b.onnx", size=401)
    assert refused.value.status == 413
    assert "'b.onnx' (401 bytes) would bring your unfinished uploads to 1001 bytes" in str(
        refused.value
    )
    upload_session_open(user_id=1, path="b.onnx", size=400)


def test_a_chunk_over_the_chunk_cap_is_refused_whole() -> None:
    session = upload_session_open(user_id=1, path="a.onnx", size=500)
    with pytest.raises(UploadSessionError, match="chunk limit"):
        upload_session_append(session, offset=0, chunks=iter([b"x" * 60, b"x" * 60]))
    assert session.received == 0
    assert upload_session_append(session, offset=0, chunks=iter([b"x" * 100])) == 100


def test_the_upload_page_endpoint_answers_the_limit_clearly(deployer: Any) -> None:
    client = signed_in(deployer)
    url = reverse("console:upload-session-create")
    for name in ("a.onnx", "b.onnx"):
        data = {"path": name, "size": 1}
        assert client.post(url, data, content_type="application/json").status_code == 201
    response = client.post(url, {"path": "c.onnx", "size": 1}, content_type="application/json")
    assert response.status_code == 429
    assert "finish or remove some before adding 'c.onnx'" in response.json()["message"]
