"""WebSocket routes (Channels)."""

from django.urls import path

from console.consumers.dashboards import DashboardConsumer
from console.consumers.validation import VersionProgressConsumer

websocket_urlpatterns: list = [
    path("ws/versions/<int:version_id>/", VersionProgressConsumer.as_asgi()),
    path("ws/dashboards/", DashboardConsumer.as_asgi()),
]
