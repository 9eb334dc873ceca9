from django.apps import AppConfig


class RepositoryConfig(AppConfig):
    name = "repository"
    verbose_name = "Model registry"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from repository import signals

        signals.connect()
