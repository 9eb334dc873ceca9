"""A real S3-protocol server for tests: moto's standalone server, a subprocess on loopback speaking
HTTP, with authentication enforced, so only the access key it issued is accepted (a test that
passes with it proves the credentials came from where the test put them)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

START_TIMEOUT_S = 30
REGION = "us-east-1"
# NOTE: moto lets this many requests through unsigned before it checks every signature: the
# three IAM calls that issue the one access key tests use.
_SETUP_ACTIONS = 3


class S3Server:
    """The server process, its endpoint and the access key it issued."""

    def __init__(self, proc: subprocess.Popen[bytes], port: int, log: Path) -> None:
        self.proc, self.log = proc, log
        self.endpoint_url = f"http://127.0.0.1:{port}"
        self.port = port
        self.access_key_id = ""
        self.secret_access_key = ""

    def env(self) -> dict[str, str]:
        """The standard AWS variables for this server and its key."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key_id,
            "AWS_SECRET_ACCESS_KEY": self.secret_access_key,
            "AWS_ENDPOINT_URL": self.endpoint_url,
            "AWS_DEFAULT_REGION": REGION,
        }

    def client(self, **overrides: Any) -> Any:
        """A boto3 S3 client with the issued key (``overrides`` replace its arguments)."""
        import boto3

        arguments: dict[str, Any] = {
            "endpoint_url": self.endpoint_url, "region_name": REGION,
            "aws_access_key_id": self.access_key_id,
            "aws_secret_access_key": self.secret_access_key,
        }  # fmt: skip
        arguments.update(overrides)
        return boto3.session.Session().client("s3", **arguments)

    def new_bucket(self) -> str:
        name = f"portico-{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(Bucket=name)
        return name

    def put_tree(self, bucket: str, prefix: str, folder: Path) -> None:
        """Upload every file under ``folder`` to ``prefix/<relative path>``."""
        client = self.client()
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                key = f"{prefix}/{path.relative_to(folder).as_posix()}".lstrip("/")
                client.put_object(Bucket=bucket, Key=key, Body=path.read_bytes())

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)


def start_s3_server(log: Path) -> S3Server:
    """Start ``python -m moto.server`` on a free loopback port; the caller must ``stop()`` it."""
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env["INITIAL_NO_AUTH_ACTION_COUNT"] = str(_SETUP_ACTIONS)
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    server = S3Server(proc, port, log)
    try:
        _wait_listening(server)
        _issue_key(server)
    except BaseException:
        server.stop()
        raise
    return server


def _issue_key(server: S3Server) -> None:
    import boto3

    iam = boto3.session.Session().client(
        "iam", endpoint_url=server.endpoint_url, region_name=REGION,
        aws_access_key_id="setup", aws_secret_access_key="setup",
    )  # fmt: skip
    iam.create_user(UserName="portico")
    key = iam.create_access_key(UserName="portico")["AccessKey"]
    policy = {"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Action": ["s3:*"], "Resource": "*"}]}  # fmt: skip
    iam.put_user_policy(UserName="portico", PolicyName="s3", PolicyDocument=json.dumps(policy))
    server.access_key_id, server.secret_access_key = key["AccessKeyId"], key["SecretAccessKey"]


def _wait_listening(server: S3Server) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if server.proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("the S3 server did not start:\n" + server.log.read_text()[-3000:])
        try:
            with socket.create_connection(("127.0.0.1", server.port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
