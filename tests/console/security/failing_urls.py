"""The console's URLs plus two that fail, one page and one API view, for the 500 tests."""

from django.http import HttpRequest, HttpResponse
from django.urls import path
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.views import APIView

from console.urls import handler500
from console.urls import urlpatterns as console_urlpatterns

SECRET_DETAIL = "password=hunter2 at /srv/private/config"


def failing_page(request: HttpRequest) -> HttpResponse:
    raise RuntimeError(SECRET_DETAIL)


class FailingApi(APIView):
    permission_classes = [AllowAny]

    def get(self, request: Request) -> HttpResponse:
        raise RuntimeError(SECRET_DETAIL)


urlpatterns = [
    path("api/failing/", FailingApi.as_view()),
    path("failing/", failing_page),
    *console_urlpatterns,
]
__all__ = ["handler500", "urlpatterns"]
