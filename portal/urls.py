from importlib import import_module

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from portal.views import base

urlpatterns = [
    path("", base.home, name="home"),
    path("login/", auth_views.LoginView.as_view(redirect_authenticated_user=True), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
]

# Each area of the portal owns its routes in portal/views/<area>.py (`urlpatterns`).
AREAS = ["chat", "threads", "recovery", "queue", "interrupts", "history", "api", "ops"]
for _area in AREAS:
    try:
        _module = import_module(f"portal.views.{_area}")
    except ModuleNotFoundError as exc:
        if exc.name != f"portal.views.{_area}":
            raise
        continue
    urlpatterns.append(path("", include(_module)))
