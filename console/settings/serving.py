"""Serving replicas (``manage.py serve``): production settings without the console's ``SECRET_KEY``.

Serving signs nothing: no sessions, CSRF tokens, password resets or signed cookies; Django only
needs a non-empty key to start. Each process makes a random one of its own, so a serving host (and
any model code that escaped its containment) holds no key the console trusts. Point
``DATABASE_URL`` at the read-mostly role of ``deploy/postgres/serving-role.sql``.
"""

import secrets

from console.settings.base import *  # noqa: F403

DEBUG = False
SECRET_KEY = secrets.token_urlsafe(50)

if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":  # noqa: F405
    # NOTE: serving's reads are small; a statement that runs longer is a stuck server, and the
    # heartbeat and revision checks that share its one registry thread must not wait behind it.
    DATABASES["default"]["OPTIONS"]["options"] = "-c statement_timeout={}".format(  # noqa: F405
        1000 * env.int("PORTICO_SERVING_STATEMENT_TIMEOUT_S", default=10)  # noqa: F405
    )
