from django.apps import AppConfig


class ServingConfig(AppConfig):  # type: ignore[misc]
    """Registered only so that ``manage.py serve`` exists; the data plane itself uses no Django."""

    name = "serving"
    verbose_name = "Serving"
