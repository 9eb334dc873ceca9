"""The environment model code gets: what runtimes need, nothing secret."""

from __future__ import annotations

from repository.config.child_env import child_env

SECRETS = {
    "SECRET_KEY": "console-signing-key",
    "DATABASE_URL": "postgres://portico:hunter2@127.0.0.1:5432/portico",
    "REDIS_URL": "redis://127.0.0.1:6379/0",
    "AWS_SECRET_ACCESS_KEY": "aws-secret",
    "AWS_ACCESS_KEY_ID": "aws-id",
    "DJANGO_SETTINGS_MODULE": "console.settings.production",
    "PGPASSWORD": "pw",
    "GOOGLE_APPLICATION_CREDENTIALS": "/k.json",
    "NVIDIA_API_KEY": "allowed prefix, secret name",
}


def test_allow_list_keeps_what_runtimes_need_and_drops_secrets() -> None:
    source = {**SECRETS, "PATH": "/usr/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
              "CUDA_VISIBLE_DEVICES": "1", "OMP_NUM_THREADS": "2", "HOME": "/root"}  # fmt: skip
    env = child_env(source, home="/tmp", extra={"PYTHONPATH": "/app"})
    assert env == {"PATH": "/usr/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
                   "CUDA_VISIBLE_DEVICES": "1", "OMP_NUM_THREADS": "2", "HOME": "/tmp",
                   "PYTHONPATH": "/app"}  # fmt: skip


def test_path_is_set_when_the_server_has_none() -> None:
    assert child_env({}, home="/tmp")["PATH"]
