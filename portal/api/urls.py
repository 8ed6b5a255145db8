"""The JSON API's routes: ``/api/`` (see ``portal.api``; external agents' requests in
``portal.api.requests``)."""

from django.urls import path

from portal.api import api
from portal.api.requests import router as requests_router

api.add_router("/requests", requests_router)

urlpatterns = [path("api/", api.urls)]
