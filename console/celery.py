"""The Celery application. Broker and backend come from settings (embedded default: a folder)."""

from celery import Celery

from console.environment import settings_module_select

settings_module_select()

app = Celery("portico")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
# Every worker sweeps the registry on its own timer (no beat process needed).
app.steps["worker"].add("repository.sweep:RegistrySweepStep")
