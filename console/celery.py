"""The Celery application. Broker and backend come from settings (embedded default: a folder)."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings.local")

app = Celery("portico")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
