"""The dashboard pages' routes (namespace ``dashboards``), included from ``console/urls.py``."""

from django.urls import path

from console.views import dashboards

app_name = "dashboards"

urlpatterns = [
    path("", dashboards.dashboard_fleet, name="fleet"),
    path("models/<str:name>/", dashboards.dashboard_model, name="model"),
    path("models/<str:name>/compare/", dashboards.dashboard_compare, name="compare"),
]
