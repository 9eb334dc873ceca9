"""The loopback-only run that ``make run`` starts: production's safety (DEBUG off, a key of its
own) without its HTTPS requirements, since nothing but this machine can reach 127.0.0.1.

The key is generated into ``VAR_DIR/secret_key`` (mode 0600) on first start and kept, so sessions
survive restarts; an explicit ``SECRET_KEY`` still wins (and must pass the production check).
"""

from console.security.secret_key import secret_key_check, secret_key_from_file
from console.settings.base import *  # noqa: F403

DEBUG = False
_given_key = env.str("SECRET_KEY", default="")  # noqa: F405
SECRET_KEY = (
    secret_key_check(_given_key, source="SECRET_KEY")
    if _given_key
    else secret_key_from_file(VAR_DIR / "secret_key")  # noqa: F405
)
ALLOWED_HOSTS = LOOPBACK_HOSTS  # noqa: F405
