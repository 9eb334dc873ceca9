"""``manage.py import_repository DIR``: every model and version of a Triton-layout folder becomes a
registry version, validated; the highest valid version of each model is promoted. Versions that
carry code are approved only with ``--approved-by ADMIN`` (a second person who vouches for the
code, recorded in the audit log); without it they wait for an admin's approval like an upload."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from repository.errors import ImportApproverError
from repository.importing import ImportApproval, import_approval, repository_import
from repository.selectors import user_get


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
        parser.add_argument(
            "--uploaded-by",
            metavar="USER",
            default="",
            help="an existing user recorded as the versions' uploader (default: nobody)",
        )
        parser.add_argument(
            "--approved-by",
            metavar="USER",
            default="",
            help="an admin, not the uploader, who vouches for the imported code: versions that "
            "carry code are approved in their name; without it they await approval",
        )

    def handle(
        self,
        *args: Any,
        directory: Path,
        sync: bool,
        model: list[str],
        uploaded_by: str,
        approved_by: str,
        **opts: Any,
    ) -> None:
        if not directory.is_dir():
            raise CommandError(f"{directory}: not a folder")
        uploader = _user("--uploaded-by", uploaded_by) if uploaded_by else None
        approve = _approval(approved_by, uploader) if approved_by else None
        result = repository_import(
            directory, sync=sync, only=model or None, uploaded_by=uploader, approve=approve
        )
        result.report(out=self.stdout, err=self.stderr)
        if not sync and result.imported:
            self.stdout.write("validation runs in the worker; promotion follows when it passes")
        if result.failed:
            raise CommandError(f"{len(result.failed)} version(s) failed validation")


def _user(flag: str, username: str) -> Any:
    user = user_get(username=username)
    if user is None:
        raise CommandError(f"{flag} {username}: there is no active user of that name")
    return user


def _approval(username: str, uploader: Any) -> ImportApproval:
    # Checked before anything is stored: a bad --approved-by imports nothing.
    try:
        return import_approval(approver=_user("--approved-by", username), uploader=uploader)
    except ImportApproverError as error:
        raise CommandError(error.message) from error
