"""The console as the browser tests run it in a subprocess: the test settings pointed at the test
process's database (passed as JSON in PORTICO_TEST_CONSOLE), and static files served by the app."""

import json
import os

from console.settings.test import *  # noqa: F403

_shared = json.loads(os.environ["PORTICO_TEST_CONSOLE"])

DATABASES["default"]["NAME"] = _shared["db_name"]  # noqa: F405
PORTICO_DASHBOARD_REPLICA_URLS = _shared["replica_urls"]
PORTICO_DASHBOARD_GROUP = _shared["group"]


def application_with_static():  # type: ignore[no-untyped-def]
    """``console.asgi.application`` plus /static/ (uvicorn --factory)."""
    from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler

    from console.asgi import application

    return ASGIStaticFilesHandler(application)
