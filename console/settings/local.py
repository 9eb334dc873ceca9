"""Development on a laptop, chosen explicitly (``PORTICO_ENV=development`` or
``DJANGO_SETTINGS_MODULE=console.settings.local``): DEBUG on and a published key, so never expose
it beyond the machine."""

from console.settings.base import *  # noqa: F403

DEBUG = env.bool("DEBUG", default=True)  # noqa: F405
SECRET_KEY = env.str("SECRET_KEY", default="portico-insecure-development-key")  # noqa: F405
