"""Production settings: what compose gives the console passes ``check --deploy`` with no
warnings, and unsafe values stop the process at start-up."""

from __future__ import annotations

import os
import re
import secrets
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from console.security.secret_key import secret_key_from_file

ROOT = Path(__file__).resolve().parents[3]
DEFAULT_RE = re.compile(r"\$\{(\w+):-([^}]*)\}")


def compose_environment(service: str) -> dict[str, str]:
    """The service's environment as compose gives it with no variables set (``${X:-d}`` → d)."""
    compose: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    environment = compose["services"][service]["environment"]
    return {name: DEFAULT_RE.sub(r"\2", str(value)) for name, value in environment.items()}


def manage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
    return subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), *args],
        cwd=ROOT,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_compose_gives_console_and_worker_the_generated_key_file_and_real_host_names() -> None:
    for service in ("console", "worker"):
        environment = compose_environment(service)
        assert "SECRET_KEY" not in environment
        assert environment["SECRET_KEY_FILE"].startswith("/run/portico-secrets/")
        assert "*" not in environment["ALLOWED_HOSTS"].split(",")


def test_check_deploy_is_clean_under_the_compose_settings(tmp_path: Path) -> None:
    key_file = tmp_path / "secret_key"
    secret_key_from_file(key_file)  # what deploy/secret-key.sh runs on the first start
    env = compose_environment("console")
    env.update(SECRET_KEY_FILE=str(key_file), PORTICO_VAR_DIR=str(tmp_path))
    result = manage("check", "--deploy", "--fail-level", "WARNING", env=env)
    assert result.returncode == 0, result.stderr
    assert "System check identified no issues" in result.stdout, result.stdout


def test_a_published_key_stops_production(tmp_path: Path) -> None:
    env = {**compose_environment("console"), "PORTICO_VAR_DIR": str(tmp_path)}
    del env["SECRET_KEY_FILE"]
    env["SECRET_KEY"] = "change-me-in-production"
    result = manage("check", env=env)
    assert result.returncode != 0
    assert "this SECRET_KEY is published" in result.stderr


def test_a_wildcard_allowed_hosts_stops_production(tmp_path: Path) -> None:
    env = {**compose_environment("console"), "PORTICO_VAR_DIR": str(tmp_path)}
    env.update(SECRET_KEY=secrets.token_urlsafe(64), ALLOWED_HOSTS="*")
    del env["SECRET_KEY_FILE"]
    result = manage("check", env=env)
    assert result.returncode != 0
    assert "ALLOWED_HOSTS" in result.stderr


def test_production_defaults_are_https_only(tmp_path: Path) -> None:
    env = {"SECRET_KEY": secrets.token_urlsafe(64), "PORTICO_VAR_DIR": str(tmp_path)}
    code = (
        "from django.conf import settings as s; "
        "print(s.DEBUG, s.SECURE_SSL_REDIRECT, s.SECURE_HSTS_SECONDS, s.SESSION_COOKIE_SECURE, "
        "s.CSRF_COOKIE_SECURE, s.SECURE_PROXY_SSL_HEADER, s.ALLOWED_HOSTS)"
    )
    result = manage("shell", "-v", "0", "-c", code, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split(None, 5)[:5] == ["False", "True", "31536000", "True", "True"]
    # Trusting X-Forwarded-Proto is opt-in: only behind a proxy that sets it.
    assert "None ['127.0.0.1', 'localhost', '[::1]']" in result.stdout


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (for kustomize) is missing")
def test_check_deploy_is_clean_under_the_kubernetes_console_settings(tmp_path: Path) -> None:
    out = subprocess.run(
        ["kubectl", "kustomize", str(ROOT / "deploy" / "kubernetes" / "overlays" / "cpu")],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    docs = [doc for doc in yaml.safe_load_all(out) if doc]
    hosts = next(d for d in docs if d["metadata"]["name"] == "portico-console-hosts")["data"]
    console = next(
        d for d in docs if d["kind"] == "Deployment" and "console" in d["metadata"]["name"]
    )
    container = console["spec"]["template"]["spec"]["containers"][0]
    env = {item["name"]: item["value"] for item in container["env"] if "value" in item}
    env.update(hosts, SECRET_KEY=secrets.token_urlsafe(64), PORTICO_VAR_DIR=str(tmp_path))
    result = manage("check", "--deploy", "--fail-level", "WARNING", env=env)
    assert result.returncode == 0, result.stderr
    # The readiness probe, as the kubelet sends it, gets the sign-in page (without its headers:
    # 400 for the pod's address).
    probe = container["readinessProbe"]["httpGet"]
    headers = {h["name"]: h["value"] for h in probe["httpHeaders"]}
    code = (
        "from django.test import Client; c = Client(); "
        f"print(c.get({probe['path']!r}, headers={headers!r}).status_code, "
        f"c.get({probe['path']!r}, headers={{'Host': '10.0.0.7:8080'}}).status_code)"
    )
    result = manage("shell", "-v", "0", "-c", code, env=env)
    assert result.stdout.split() == ["200", "400"], result.stderr
