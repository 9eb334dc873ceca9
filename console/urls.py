from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/", include("console.api.urls")),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("dashboards/", include("console.views.dashboards_urls")),
    # Console pages last: they own the root.
    path("", include("console.views.urls")),
]

# A 500 names its request id and never the exception (console.views.errors).
handler500 = "console.views.errors.server_error"
