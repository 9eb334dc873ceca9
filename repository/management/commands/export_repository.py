"""``manage.py export_repository DIR``: write each model's promoted version in Triton layout."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from repository.importing import repository_export


class Command(BaseCommand):
    help = "Export the promoted versions as a Triton model repository folder."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("directory", type=Path)

    def handle(self, *args: Any, directory: Path, **options: Any) -> None:
        if directory.exists() and any(directory.iterdir()):
            raise CommandError(f"{directory}: exists and is not empty")
        for name, number in repository_export(directory):
            self.stdout.write(f"{name} v{number}")
