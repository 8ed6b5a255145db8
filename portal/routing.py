"""Websocket routes. Consumers only subscribe and forward; they never write."""

from django.urls import path

from portal.consumers import QueueConsumer, ThreadConsumer

websocket_urlpatterns = [
    path("ws/threads/<uuid:thread_id>/", ThreadConsumer.as_asgi()),
    path("ws/queue/", QueueConsumer.as_asgi()),
]
