"""The portal's URLs and one view that fails, for ``debug_off_settings``."""

from django.http import HttpRequest, HttpResponse
from django.urls import path

from portal.urls import urlpatterns as portal_urlpatterns


def fail(request: HttpRequest) -> HttpResponse:
    raise RuntimeError("a fault on purpose: the 500 page is under test")


urlpatterns = [path("test-fault/", fail), *portal_urlpatterns]
