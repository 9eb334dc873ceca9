"""Bring the whole platform up on one machine: console, Celery worker and serving, one log.

This is what `make run` calls. On first start it migrates, creates an admin account (printed once,
or taken from PORTICO_ADMIN_USER / PORTICO_ADMIN_PASSWORD) and registers the demo models, validated
and promoted. Then it runs the three processes until Ctrl-C, interleaving their output with a
prefix per process. A serving process that dies (a crash, the OOM killer, a SIGKILL) is started
again, as Kubernetes or compose's restart policy would (at most RESTARTS_PER_MINUTE times a minute);
if the console or the worker exits, everything stops.

Console and serving listen on 127.0.0.1 only, and serving asks for no inference token there
(``PORTICO_INFERENCE_AUTH=off``) so the demo needs none; the banner says so. An explicit
``PORTICO_INFERENCE_AUTH=required`` in the environment wins.
"""

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand

from console.platform_setup import ensure_admin_account, ensure_demo_models
from repository.console_key import console_key_publish

PROCESS_COLOURS = {"console": "36", "worker": "35", "serving": "32"}
LOOPBACK = "127.0.0.1"
INFERENCE_AUTH_VARIABLE = "PORTICO_INFERENCE_AUTH"
RESTARTED = frozenset({"serving"})
RESTARTS_PER_MINUTE = 5


class Command(BaseCommand):
    help = "Run console, worker and serving together (the embedded default unless configured)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--console-port", type=int, default=8080)
        parser.add_argument("--http-port", type=int, default=8000)
        parser.add_argument("--grpc-port", type=int, default=8001)
        parser.add_argument("--metrics-port", type=int, default=8002)
        parser.add_argument("--no-demo", action="store_true", help="do not register demo models")

    def handle(self, *args: Any, **options: Any) -> None:
        call_command("migrate", interactive=False, verbosity=0)
        ensure_admin_account(stdout=self.stdout)
        # Before serving's first token table, so the console's Try-it works from the start.
        console_key_publish()
        if not options["no_demo"]:
            ensure_demo_models(stdout=self.stdout)
        commands = self._process_commands(options)
        self._run_until_interrupted(commands)

    def _process_commands(self, options: dict[str, Any]) -> dict[str, list[str]]:
        python = sys.executable
        manage = str(Path(settings.BASE_DIR) / "manage.py")
        celery = str(Path(python).with_name("celery"))
        return {
            "console": [python, manage, "runconsole", "--host", LOOPBACK,
                        "--port", str(options["console_port"])],
            "worker": [celery, "-A", "console", "worker", "--loglevel", "INFO",
                       "--concurrency", "1"],
            "serving": [
                python, manage, "serve",
                "--host", LOOPBACK,
                "--http-port", str(options["http_port"]),
                "--grpc-port", str(options["grpc_port"]),
                "--metrics-port", str(options["metrics_port"]),
                # One version that fails to load must not take the whole platform down; it is
                # reported on the console's replicas page instead.
                "--exit-on-error", "false",
            ],
        }  # fmt: skip

    def _run_until_interrupted(self, commands: dict[str, list[str]]) -> None:
        # NOTE: the children run in their own sessions (so a Ctrl-C reaches them once, from us);
        # a SIGTERM to this process must therefore stop them too, not orphan them.
        signal.signal(signal.SIGTERM, _interrupt)
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        env.setdefault(INFERENCE_AUTH_VARIABLE, "off")
        processes = {name: _start(name, command, env) for name, command in commands.items()}
        restarts: list[float] = []
        self.stdout.write(
            f"Portico is up: console http://{LOOPBACK}:{commands['console'][-1]} "
            "(Ctrl-C stops everything)"
        )
        self.stdout.write(_auth_banner(env[INFERENCE_AUTH_VARIABLE]))
        try:
            while True:
                time.sleep(0.5)
                exited = [name for name, process in processes.items() if process.poll() is not None]
                if not exited:
                    continue
                if not set(exited) <= RESTARTED or not _may_restart(restarts):
                    self.stderr.write(f"{', '.join(exited)} exited; stopping the platform")
                    break
                for name in exited:
                    code = processes[name].returncode
                    self.stderr.write(f"{name} exited with {code}; starting it again")
                    processes[name] = _start(name, commands[name], env)
        except KeyboardInterrupt:
            self.stdout.write("stopping the platform")
        finally:
            _stop_all(processes)


def _auth_banner(mode: str) -> str:
    if mode.strip().lower() == "off":
        return (
            f"Inference auth is OFF: serving answers anyone who reaches {LOOPBACK} without a "
            "token (set PORTICO_INFERENCE_AUTH=required to ask for one)"
        )
    return "Inference auth is required: clients send 'Authorization: Bearer <token>'"


def _start(name: str, command: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, start_new_session=True
    )
    assert process.stdout is not None
    threading.Thread(target=_relay_output, args=(name, process.stdout), daemon=True).start()
    return process


def _may_restart(restarts: list[float]) -> bool:
    """Whether one more restart fits the budget (a process that dies at once would loop)."""
    now = time.monotonic()
    restarts[:] = [t for t in restarts if now - t < 60] + [now]
    return len(restarts) <= RESTARTS_PER_MINUTE


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _relay_output(name: str, stream: IO[bytes]) -> None:
    colour = PROCESS_COLOURS.get(name, "0")
    prefix = f"\x1b[{colour}m{name:>8} |\x1b[0m " if sys.stdout.isatty() else f"{name:>8} | "
    for raw in iter(stream.readline, b""):
        sys.stdout.write(prefix + raw.decode(errors="replace"))
        sys.stdout.flush()


def _stop_all(processes: dict[str, subprocess.Popen[bytes]]) -> None:
    """SIGTERM everything and wait (30 s at most); a second Ctrl-C or SIGTERM kills at once."""
    for process in processes.values():
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    try:
        for process in processes.values():
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
    except KeyboardInterrupt:
        for process in processes.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
