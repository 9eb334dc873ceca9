"""How a page tells the user what an action did: the registry's own words, on the next page."""

from __future__ import annotations

from collections.abc import Callable

from django.contrib import messages
from django.http import HttpRequest

from repository.errors import RegistryError


def report_outcome(request: HttpRequest, run: Callable[[], str]) -> bool:
    """Run a registry action; flash the success message it returns, or the registry error's
    message (which names what was refused and why). Whether it succeeded."""
    try:
        message = run()
    except RegistryError as error:
        messages.error(request, error.message)
        return False
    messages.success(request, message)
    return True


def safe_next(request: HttpRequest, default: str) -> str:
    """The form's ``next`` path, or ``default``; only a local path, so no open redirect."""
    given = request.POST.get("next") or ""
    return given if given.startswith("/") and not given.startswith("//") else default
