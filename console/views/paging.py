"""Paging a list page: the page asked for, and the query string that keeps its filters."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.core.paginator import Page, Paginator
from django.db.models import QuerySet
from django.http import HttpRequest


def paginate(
    request: HttpRequest, items: Sequence[Any] | QuerySet[Any], *, per_page: int
) -> tuple[Page[Any], str]:
    """The ``?page=`` page of ``items`` (the last one when out of range) and the request's other
    query parameters, encoded, for the links to the neighbouring pages."""
    page = Paginator(items, per_page).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    return page, query.urlencode()
