"""WSGI entry point (the console is ASGI-first; this is for servers that only speak WSGI)."""

from django.core.wsgi import get_wsgi_application

from console.environment import settings_module_select

settings_module_select()
application = get_wsgi_application()

from console.security.secret_key import secret_key_required  # noqa: E402

secret_key_required()
