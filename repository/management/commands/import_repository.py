"""``manage.py import_repository DIR``: every model and version of a Triton-layout folder becomes a
registry version, validated; the highest valid version of each model is promoted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from repository.importing import ImportResult, repository_import


class Command(BaseCommand):
    help = "Import a Triton model repository folder into the registry."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("directory", type=Path)
        parser.add_argument(
            "--sync",
            action="store_true",
            help="validate in this process instead of the worker, then promote",
        )
        parser.add_argument("--model", action="append", default=[], help="only these models")

    def handle(
        self, *args: Any, directory: Path, sync: bool, model: list[str], **opts: Any
    ) -> None:
        if not directory.is_dir():
            raise CommandError(f"{directory}: not a folder")
        result = repository_import(directory, sync=sync, only=model or None)
        self._report(result, sync=sync)
        if result.failed:
            raise CommandError(f"{len(result.failed)} version(s) failed validation")

    def _report(self, result: ImportResult, *, sync: bool) -> None:
        for name, number, state in result.imported:
            self.stdout.write(f"{name} v{number}: {state}")
        for name, number, reason in result.failed:
            self.stderr.write(f"{name} v{number}: failed: {reason}")
        for name, reason in result.skipped:
            self.stderr.write(f"{name}: skipped: {reason}")
        for name, number in result.promoted:
            self.stdout.write(f"{name} v{number}: promoted")
        if not sync and result.imported:
            self.stdout.write("validation runs in the worker; promotion follows when it passes")
