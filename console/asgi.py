"""ASGI entry point: HTTP through Django (behind the request-body cap), WebSockets through
Channels."""

from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler
from django.core.asgi import get_asgi_application

from console.environment import settings_module_select

settings_module_select()
# The console's stylesheet and scripts are served by the app itself (no separate web server in the
# embedded default); a reverse proxy in front may serve /static/ from collectstatic instead.
django_asgi_app = ASGIStaticFilesHandler(get_asgi_application())

from console.security.secret_key import secret_key_required  # noqa: E402

secret_key_required()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from console.routing import websocket_urlpatterns  # noqa: E402
from console.security.body_limit import request_body_limit  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": request_body_limit(django_asgi_app),
        "websocket": AllowedHostsOriginValidator(
            AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
        ),
    }
)
