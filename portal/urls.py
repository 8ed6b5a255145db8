from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from portal.api import urls as api_urls
from portal.web import base

urlpatterns = [
    # The API first: every API request is resolved here, and the includes below have no
    # prefix of their own, so each would be tried before it.
    path("", include(api_urls)),
    path("", base.home, name="home"),
    path("login/", auth_views.LoginView.as_view(redirect_authenticated_user=True), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    # Each area of the portal owns its routes (`urlpatterns` in its module).
    path("", include("portal.web.chat")),
    path("", include("portal.web.threads")),
    path("", include("portal.web.recovery")),
    path("", include("portal.web.queue")),
    path("", include("portal.web.interrupts")),
    path("", include("portal.web.history")),
    path("", include("portal.web.rules")),
    path("", include("portal.web.ops")),
    path("", include("portal.web.slack")),
]
