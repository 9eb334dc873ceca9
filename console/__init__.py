"""Portico's console: Django project wiring, browser UI, management API, live dashboards."""

from console.celery import app as celery_app

__all__ = ["celery_app"]
