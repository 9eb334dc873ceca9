"""factory_boy factories for registry data (users with roles, models, versions, blobs...)."""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path
from typing import Any

import factory
from django.contrib.auth import get_user_model

from repository.blobs import blob_store_file
from repository.models import (
    ApiToken,
    Blob,
    Event,
    GoldenRequest,
    GoldenState,
    Model,
    ModelVersion,
    VersionFile,
    VersionState,
)
from repository.services.roles import user_role_grant


class UserFactory(factory.django.DjangoModelFactory):
    """A user; ``role="deployer"`` puts them in that role's group."""

    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)
        skip_postgeneration_save = True

    username = factory.Sequence(lambda n: f"user{n}")
    email = factory.LazyAttribute(lambda u: f"{u.username}@example.com")
    password = factory.django.Password("password")

    @factory.post_generation
    def role(self, create: bool, extracted: str | None, **kwargs: Any) -> None:
        if create and extracted:
            user_role_grant(user=self, role=extracted)


class ModelFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Model
        django_get_or_create = ("name",)

    name = factory.Sequence(lambda n: f"model_{n}")
    backend = "onnxruntime"
    description = "a test model"


class BlobFactory(factory.django.DjangoModelFactory):
    """A blob whose content really is in blob storage (``content`` bytes, random by default)."""

    class Meta:
        model = Blob

    # Declared (not a Param) so that it reaches _create: each blob gets content of its own.
    content = factory.Sequence(lambda n: f"blob content {n}".encode())

    @classmethod
    def _create(
        cls, model_class: type[Blob], *args: Any, content: bytes = b"", **kwargs: Any
    ) -> Blob:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "blob"
            path.write_bytes(content)
            return blob_store_file(path)

    @classmethod
    def _build(
        cls, model_class: type[Blob], *args: Any, content: bytes = b"", **kwargs: Any
    ) -> Blob:
        return Blob(sha256=hashlib.sha256(content).hexdigest(), size=len(content))


class ModelVersionFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = ModelVersion

    model = factory.SubFactory(ModelFactory)
    number = factory.Sequence(lambda n: n + 1)
    state = VersionState.READY
    config_text = factory.LazyAttribute(
        lambda v: f'name: "{v.model.name}"\nbackend: "onnxruntime"\nmax_batch_size: 0\n'
    )
    backend = "onnxruntime"
    uploaded_by = factory.SubFactory(UserFactory, role="deployer")


class VersionFileFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = VersionFile

    version = factory.SubFactory(ModelVersionFactory)
    path = "model.onnx"
    blob = factory.SubFactory(BlobFactory)
    model_level = False


class GoldenRequestFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = GoldenRequest

    model = factory.SubFactory(ModelFactory)
    name = factory.Sequence(lambda n: f"golden_{n}")
    inputs = factory.LazyFunction(
        lambda: [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]
    )
    expected_outputs = factory.LazyFunction(dict)
    state = GoldenState.RECORDED


class EventFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Event

    action = Event.Action.UPLOAD
    model = factory.SubFactory(ModelFactory)
    model_name = factory.LazyAttribute(lambda e: e.model.name)
    actor_name = "system"


class ApiTokenFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = ApiToken

    user = factory.SubFactory(UserFactory)
    name = "test token"
    role = "viewer"
    key_hash = factory.Sequence(lambda n: hashlib.sha256(f"key{n}".encode()).hexdigest())
    prefix = factory.Sequence(lambda n: f"key{n}"[:8])
