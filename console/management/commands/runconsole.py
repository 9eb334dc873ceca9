"""Run the console (pages, management API, WebSockets) as an ASGI app under uvicorn."""

import logging
from typing import Any

import uvicorn
from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError

from console.security.secret_key import secret_key_required
from repository.console_key import console_key_publish

logger = logging.getLogger(__name__)


class Command(BaseCommand):
    help = "Run the Portico console (HTTP and WebSockets) on an ASGI server."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8080)
        parser.add_argument("--workers", type=int, default=1)

    def handle(self, *args: Any, host: str, port: int, workers: int, **options: Any) -> None:
        try:
            secret_key_required()  # here too, so the refusal is one line, not an import traceback
        except ImproperlyConfigured as error:
            raise CommandError(str(error)) from error
        # Before the first request: serving learns the console key's hash from the token table.
        # A database that is not reachable or migrated yet must not keep the console down: the
        # first call to serving publishes it then.
        try:
            console_key_publish()
        except DatabaseError as error:
            logger.warning("console key not published yet (%s); the first call will", error)
        uvicorn.run(
            "console.asgi:application",
            host=host,
            port=port,
            workers=workers,
            log_level="info",
            lifespan="off",
        )
