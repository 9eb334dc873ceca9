"""``python manage.py serve``: one serving replica (a Triton folder, or the registry)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from serving.cli import add_arguments, configure_logging, settings_from_args


class Command(BaseCommand):  # type: ignore[misc]
    # NOTE: the serving process needs no console code; a broken URLconf must not stop it.
    requires_system_checks: list[str] = []
    help = (
        "Serve models over KServe v2 HTTP and gRPC with Prometheus metrics. With "
        "--model-repository DIR serve that Triton-layout folder; without it serve the registry's "
        "promoted versions."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        add_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        from serving.main import main

        configure_logging(options.get("log_verbose") or 0)
        try:
            settings = settings_from_args(options)
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        code = main(settings)
        if code:
            sys.exit(code)
