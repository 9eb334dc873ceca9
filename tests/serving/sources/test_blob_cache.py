"""The replica's blob cache trusts nothing on disk: a private folder, blobs hashed again by each
process, model folders of read-only copies; and an approved but hostile Python model served from
the registry can change neither the cache nor its own files, nor read the server's secrets."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import stat
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient

from serving.main import ServingProcess
from serving.settings import ServingSettings
from serving.sources.blob_cache import BlobCache, UnsafeCacheDirError
from serving.sources.registry import RegistrySource
from tests.serving.sources.test_registry import promote, registry_settings

pytestmark = [pytest.mark.embedded, pytest.mark.timeout(180)]

WEIGHTS = b"weights that other versions share" * 100


@dataclasses.dataclass(frozen=True)
class Ref:
    path: str
    sha256: str
    size: int


def ref_of(path: str, content: bytes) -> Ref:
    return Ref(path, hashlib.sha256(content).hexdigest(), len(content))


def cache_over(root: Path, *contents: bytes) -> BlobCache:
    stored = {hashlib.sha256(c).hexdigest(): c for c in contents}
    return BlobCache(root, lambda sha256: io.BytesIO(stored[sha256]))


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_cache_folder_is_created_private(tmp_path: Path) -> None:
    cache = cache_over(tmp_path / "cache")
    for folder in (cache.root, cache.root / "blobs", cache.root / "models"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700


def test_cache_folder_open_to_group_or_others_is_refused(tmp_path: Path) -> None:
    (tmp_path / "cache").mkdir(mode=0o750)
    (tmp_path / "cache").chmod(0o750)
    with pytest.raises(UnsafeCacheDirError, match="mode 750"):
        cache_over(tmp_path / "cache")


def test_cache_folder_of_another_user_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "cache"
    folder.mkdir(mode=0o700)
    if os.geteuid() == 0:
        os.chown(folder, 65534, 65534)
    else:  # a folder this user cannot own: the root's
        folder = Path("/root") if Path("/root").is_dir() else Path("/")
    with pytest.raises(UnsafeCacheDirError, match="belongs to uid"):
        cache_over(folder)


def test_without_a_configured_folder_each_replica_gets_its_own_private_one(tmp_path: Path) -> None:
    settings = dataclasses.replace(registry_settings(tmp_path), cache_dir=None)
    first, second = RegistrySource(settings), RegistrySource(settings)
    try:
        assert first.cache.root != second.cache.root
        for source in (first, second):
            assert source.cache.root.parent == Path(tempfile.gettempdir())
            assert stat.S_IMODE(source.cache.root.stat().st_mode) == 0o700
    finally:
        for source in (first, second):
            import shutil

            shutil.rmtree(source.cache.root)


def test_a_blob_changed_on_disk_is_hashed_and_fetched_again_by_the_next_process(
    tmp_path: Path,
) -> None:
    ref = ref_of("model.bin", WEIGHTS)
    blob = cache_over(tmp_path / "cache", WEIGHTS).blob(ref, what="test")
    blob.chmod(0o600)
    blob.write_bytes(b"X" * len(WEIGHTS))  # same size: a size check alone would trust it
    again = cache_over(tmp_path / "cache", WEIGHTS).blob(ref, what="test")
    assert again.read_bytes() == WEIGHTS


def test_model_folders_hold_read_only_copies_a_model_cannot_reach_the_blob_through(
    tmp_path: Path,
) -> None:
    ref = ref_of("model.bin", WEIGHTS)
    cache = cache_over(tmp_path / "cache", WEIGHTS)
    folder = cache.model_folder(model="m", version=1, key="1-a", files=[ref], model_files=[])
    own = folder / "1" / "model.bin"
    blob = cache.root / "blobs" / ref.sha256
    assert own.stat().st_ino != blob.stat().st_ino
    assert stat.S_IMODE(own.stat().st_mode) == 0o444
    own.chmod(0o644)  # what a model running as the server's user can always do
    own.write_bytes(b"overwritten by the model")
    assert sha256_of(blob) == ref.sha256
    rebuilt = cache_over(tmp_path / "cache", WEIGHTS).model_folder(
        model="m", version=1, key="1-a", files=[ref], model_files=[]
    )
    assert (rebuilt / "1" / "model.bin").read_bytes() == WEIGHTS


# Approved code that tries to read the server's secrets and to write into the cache and its own
# files; it reports what it saw and what it managed through its output.
HOSTILE = textwrap.dedent("""\
    import json, os
    from pathlib import Path
    import numpy as np
    import triton_python_backend_utils as pb_utils


    def attempt(path):
        try:
            os.chmod(path, 0o666)
            with open(path, "r+b") as f:
                f.write(b"corrupted by the model")
            return "written"
        except OSError as error:
            return type(error).__name__


    class TritonPythonModel:
        def initialize(self, args):
            model_dir = Path(args["model_repository"])
            blobs = model_dir.parent.parent.parent / "blobs"
            self.report = {"env": dict(os.environ), "own": attempt(__file__),
                           "weights": attempt(model_dir / "1" / "weights.bin"),
                           "blobs": [attempt(p) for p in sorted(blobs.iterdir())]}

        def execute(self, requests):
            seen = json.dumps(self.report).encode()
            return [pb_utils.InferenceResponse([pb_utils.Tensor(
                "REPORT", np.array([seen], dtype=object))]) for _ in requests]
""")
HOSTILE_CONFIG = """name: "hostile" backend: "python" max_batch_size: 0
input { name: "INPUT0" data_type: TYPE_FP32 dims: [1] }
output { name: "REPORT" data_type: TYPE_STRING dims: [1] }
"""


def approved_python_version(tmp_path: Path) -> Any:
    from django.utils import timezone

    from repository.blobs import blob_store_file
    from repository.selectors.approvals import model_version_code
    from tests.factories import ModelFactory, ModelVersionFactory, UserFactory, VersionFileFactory

    version = ModelVersionFactory(
        model=ModelFactory(name="hostile", backend="python"), number=1, backend="python",
        config_text=HOSTILE_CONFIG, needs_approval=True, approved_at=timezone.now(),
        approved_by=UserFactory(role="admin"),
    )  # fmt: skip
    for path, content in (("model.py", HOSTILE.encode()), ("weights.bin", WEIGHTS)):
        source = tmp_path / "upload" / path
        source.parent.mkdir(exist_ok=True)
        source.write_bytes(content)
        VersionFileFactory(version=version, path=path, blob=blob_store_file(source))
    # The approval covers exactly these files, as a real review would (else it cannot serve).
    version.approved_code = model_version_code(version=version)
    version.save(update_fields=["approved_code"])
    return version


@pytest.mark.django_db(transaction=True)
def test_hostile_approved_model_changes_neither_the_cache_nor_its_files_and_sees_no_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SECRET_KEY", "console-signing-key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-secret")
    promote(approved_python_version(tmp_path))
    settings: ServingSettings = registry_settings(tmp_path)
    with ServingProcess(settings) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        tensor = httpclient.InferInput("INPUT0", [1], "FP32")
        tensor.set_data_from_numpy(np.zeros(1, dtype=np.float32))
        report = json.loads(client.infer("hostile", [tensor]).as_numpy("REPORT")[0])
        client.close()
    assert report["blobs"] and "written" not in report["blobs"], report["blobs"]
    assert report["own"] != "written" and report["weights"] != "written"
    blobs = sorted((tmp_path / "cache" / "blobs").iterdir())
    assert len(blobs) == 2 and all(sha256_of(blob) == blob.name for blob in blobs)
    folder = next((tmp_path / "cache" / "models" / "hostile").iterdir())
    assert (folder / "1" / "model.py").read_text() == HOSTILE
    assert (folder / "1" / "weights.bin").read_bytes() == WEIGHTS
    seen = report["env"]
    for secret in ("SECRET_KEY", "AWS_SECRET_ACCESS_KEY", "DATABASE_URL", "REDIS_URL"):
        assert secret not in seen
    assert "DJANGO_SETTINGS_MODULE" not in seen
