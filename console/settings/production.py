"""Production: everything comes from the environment; refuses to start with the development key."""

from django.core.exceptions import ImproperlyConfigured

from console.settings.base import *  # noqa: F403

DEBUG = False
SECRET_KEY = env.str("SECRET_KEY")  # noqa: F405
if SECRET_KEY.startswith("portico-insecure"):
    raise ImproperlyConfigured("SECRET_KEY must be set in production")
SESSION_COOKIE_SECURE = env.bool("SESSION_COOKIE_SECURE", default=True)  # noqa: F405
CSRF_COOKIE_SECURE = env.bool("CSRF_COOKIE_SECURE", default=True)  # noqa: F405
