"""``manage.py create_token USER --role viewer|deployer|admin|invoker [--models m1,m2]
[--expires-days N] [--rps R] [--max-concurrency C]``: print a new API token, alone."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from repository.errors import RegistryError
from repository.models import Role
from repository.services import api_token_create, user_role_grant
from repository.services.tokens import DEFAULT_EXPIRY_DAYS


class Command(BaseCommand):
    help = "Create an API token for USER (created if missing) and print it once on stdout."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--role", choices=Role.values, default=Role.VIEWER.value)
        parser.add_argument("--name", default="", help="a label for the token")
        parser.add_argument(
            "--models", default="", help="invoker: the models it may call, comma-separated (*: all)"
        )
        parser.add_argument(
            "--expires-days", type=int, default=DEFAULT_EXPIRY_DAYS,
            help=f"days until it expires (default {DEFAULT_EXPIRY_DAYS})",
        )  # fmt: skip
        parser.add_argument("--rps", type=float, help="inference requests per second per replica")
        parser.add_argument(
            "--max-concurrency", type=int, help="concurrent inference requests per replica"
        )

    def handle(self, *args: Any, username: str, role: str, name: str, **options: Any) -> None:
        try:
            key = self._create(username, role, name, options)
        except RegistryError as error:
            raise CommandError(error.message) from error
        # The key alone on stdout, so scripts can capture it: TOKEN=$(manage.py create_token ...)
        self.stdout.write(key)

    def _create(self, username: str, role: str, name: str, options: dict[str, Any]) -> str:
        with transaction.atomic():
            user, created = get_user_model().objects.get_or_create(username=username)
            if created:
                user.set_unusable_password()
                user.save(update_fields=["password"])
            # An invoker is an application, not a console user: it gets no console role.
            if role != Role.INVOKER:
                user_role_grant(user=user, role=role)
            # NOTE: no actor, so any role for any user. Whoever runs manage.py already holds the
            # settings (SECRET_KEY, the database's credentials) and could write any row; refusing
            # here would protect nothing. The API and console pass the signed-in actor, and there
            # a token for someone else is limited to the viewer role (or invoker, for an admin).
            _, key = api_token_create(
                user=user,
                role=role,
                name=name or "command line",
                models=[m for m in options["models"].split(",") if m],
                expires_days=options["expires_days"],
                rate_limit_rps=options["rps"],
                max_concurrency=options["max_concurrency"],
            )
        return key
