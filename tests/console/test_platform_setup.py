"""First-start steps of `make run`: the demo models, validated for real and promoted."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from console.platform_setup import ensure_demo_models
from repository.models import Event, ModelVersion, VersionState

pytestmark = [pytest.mark.django_db, pytest.mark.embedded]


def test_demo_repository_imports_with_the_real_check_and_every_model_is_promoted(  # type: ignore[no-untyped-def]
    settings, tmp_path: Path
) -> None:
    settings.UPLOAD_DIR = tmp_path / "uploads"
    out = io.StringIO()
    ensure_demo_models(stdout=out)
    versions = ModelVersion.objects.select_related("model")
    assert {v.model.name: v.state for v in versions} == {
        name: VersionState.PROMOTED for name in ("mlp", "preprocess", "pipeline")
    }, out.getvalue()
    assert all(v.config_text for v in versions)
    # The demo's Python code is Portico's own: approved as shipped, in nobody's name.
    preprocess = versions.get(model__name="preprocess")
    assert preprocess.approved and preprocess.approved_by is None
    assert set(preprocess.approved_code["files"]) == {"model.py"}
    shipped = Event.objects.get(action="approve")
    assert (shipped.actor_name, shipped.detail["source"]) == ("system", "demo")
