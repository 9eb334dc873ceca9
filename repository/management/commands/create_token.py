"""``manage.py create_token USER --role viewer|deployer|admin``: print a new API token, alone."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandParser
from django.db import transaction

from repository.models import Role
from repository.services import api_token_create, user_role_grant


class Command(BaseCommand):
    help = "Create an API token for USER (created if missing) and print it once on stdout."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--role", choices=Role.values, default=Role.VIEWER.value)
        parser.add_argument("--name", default="", help="a label for the token")

    def handle(self, *args: Any, username: str, role: str, name: str, **options: Any) -> None:
        with transaction.atomic():
            user, created = get_user_model().objects.get_or_create(username=username)
            if created:
                user.set_unusable_password()
                user.save(update_fields=["password"])
            user_role_grant(user=user, role=role)
            # NOTE: no actor, so any role for any user. Whoever runs manage.py already holds the
            # settings (SECRET_KEY, the database's credentials) and could write any row; refusing
            # here would protect nothing. The API and console pass the signed-in actor, and there
            # a token for someone else is limited to the viewer role.
            _, key = api_token_create(user=user, role=role, name=name or "command line")
        # The key alone on stdout, so scripts can capture it: TOKEN=$(manage.py create_token ...)
        self.stdout.write(key)
