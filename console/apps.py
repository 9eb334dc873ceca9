from pathlib import Path

from django.apps import AppConfig
from django.conf import settings


class ConsoleConfig(AppConfig):
    name = "console"
    verbose_name = "Portico console"

    def ready(self) -> None:
        # NOTE: kombu's filesystem transport (the embedded default's broker) fails to publish into
        # a missing folder, and console, worker and tests can each be the first to need it.
        for option in ("data_folder_in", "data_folder_out", "processed_folder", "control_folder"):
            folder = settings.CELERY_BROKER_TRANSPORT_OPTIONS.get(option)
            if folder:
                Path(folder).mkdir(parents=True, exist_ok=True)
