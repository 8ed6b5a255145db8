"""The JSON API's routes: ``/api/`` (see ``portal.api``)."""

from django.urls import path

from portal.api import api

urlpatterns = [path("api/", api.urls)]
