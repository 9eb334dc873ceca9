"""S3 access for serving: tritonserver's ``s3://`` URL forms, and errors that name the object and
say why, against a real S3-protocol server."""

from __future__ import annotations

import pytest

from serving.sources.s3 import ObjectStoreError, S3Bucket, S3Location, parse_s3_url
from tests.s3_server import S3Server

pytestmark = pytest.mark.embedded


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("s3://bucket", S3Location("bucket", "")),
        ("s3://bucket/path/to/repo/", S3Location("bucket", "path/to/repo")),
        (
            "s3://minio.local:9000/bucket/repo",
            S3Location("bucket", "repo", "http://minio.local:9000"),
        ),
        ("s3://127.0.0.1:9000/bucket", S3Location("bucket", "", "http://127.0.0.1:9000")),
        ("s3://https://store:443/bucket/a/b", S3Location("bucket", "a/b", "https://store:443")),
        ("s3://http://store:80/bucket/a", S3Location("bucket", "a", "http://store:80")),
    ],
)
def test_repository_urls_parse_as_tritonserver_reads_them(url: str, expected: S3Location) -> None:
    assert parse_s3_url(url) == expected


@pytest.mark.parametrize("url", ["s3://", "s3:///path", "gs://bucket/path"])
def test_malformed_repository_urls_are_refused(url: str) -> None:
    with pytest.raises(ValueError, match=url.replace("/", ".")):
        parse_s3_url(url)


def test_bucket_reads_lists_and_downloads_objects(aws_env: S3Server, tmp_path) -> None:  # type: ignore[no-untyped-def]
    bucket = aws_env.new_bucket()
    aws_env.client().put_object(Bucket=bucket, Key="repo/m/1/model.onnx", Body=b"weights")
    aws_env.client().put_object(Bucket=bucket, Key="other/x", Body=b"x")
    store = S3Bucket(bucket)  # endpoint, region and key from the AWS variables alone
    with store.open("repo/m/1/model.onnx") as body:
        assert body.read() == b"weights"
    assert [o.key for o in store.objects("repo/")] == ["repo/m/1/model.onnx"]
    store.download("repo/m/1/model.onnx", tmp_path / "copy" / "model.onnx")
    assert (tmp_path / "copy" / "model.onnx").read_bytes() == b"weights"
    assert [p.name for p in (tmp_path / "copy").iterdir()] == ["model.onnx"]


def test_missing_object_is_an_error_naming_it(aws_env: S3Server) -> None:
    bucket = aws_env.new_bucket()
    with pytest.raises(ObjectStoreError, match=f"s3://{bucket}/nope: NoSuchKey"):
        S3Bucket(bucket).open("nope")


def test_a_wrong_secret_in_the_environment_is_refused_by_the_server(
    aws_env: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    bucket = aws_env.new_bucket()
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    with pytest.raises(ObjectStoreError, match=f"s3://{bucket}/repo/: SignatureDoesNotMatch"):
        list(S3Bucket(bucket).objects("repo/"))


def test_an_unreachable_endpoint_is_an_error_naming_the_object(aws_env: S3Server) -> None:
    from tests.ports import free_port

    store = S3Bucket("bucket", endpoint_url=f"http://127.0.0.1:{free_port()}")
    with pytest.raises(ObjectStoreError, match="s3://bucket/key: Could not connect"):
        store.open("key")
