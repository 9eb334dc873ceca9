"""Production, the default: every difference from base comes from the environment, and the
defaults are the safe ones (HTTPS only, HSTS, secure cookies).

``SECRET_KEY`` (or ``SECRET_KEY_FILE``) is required by the console, which signs sessions and CSRF
tokens: it refuses to start without one (``console.asgi``, ``console.wsgi``, ``runconsole``). A
short or published key stops any process at start-up. Processes that sign nothing (the worker,
serving, ``migrate``, ``create_token``) run without one.
"""

from django.core.exceptions import ImproperlyConfigured

from console.security.secret_key import secret_key_check
from console.settings.base import *  # noqa: F403

DEBUG = False
SECRET_KEY = env.str("SECRET_KEY", default="")  # noqa: F405
if SECRET_KEY:
    secret_key_check(SECRET_KEY, source="SECRET_KEY")

if "*" in ALLOWED_HOSTS:  # noqa: F405
    # NOTE: "*" also switches off Channels' WebSocket Origin check (AllowedHostsOriginValidator).
    raise ImproperlyConfigured("ALLOWED_HOSTS: name the console's host names; '*' is refused")

# Behind a TLS-terminating proxy: trust its X-Forwarded-Proto only when told the proxy sets it
# (and strips it from clients), e.g. SECURE_PROXY_SSL_HEADER=HTTP_X_FORWARDED_PROTO,https.
_proxy_header = env.tuple("SECURE_PROXY_SSL_HEADER", default=())  # noqa: F405
SECURE_PROXY_SSL_HEADER = tuple(_proxy_header) if _proxy_header else None
SECURE_SSL_REDIRECT = env.bool("SECURE_SSL_REDIRECT", default=True)  # noqa: F405
SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=365 * 24 * 3600)  # noqa: F405
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool(  # noqa: F405
    "SECURE_HSTS_INCLUDE_SUBDOMAINS", default=True
)
SECURE_HSTS_PRELOAD = env.bool("SECURE_HSTS_PRELOAD", default=True)  # noqa: F405
SESSION_COOKIE_SECURE = env.bool("SESSION_COOKIE_SECURE", default=True)  # noqa: F405
CSRF_COOKIE_SECURE = env.bool("CSRF_COOKIE_SECURE", default=True)  # noqa: F405
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
