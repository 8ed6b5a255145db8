"""The JSON API assembled: one ``NinjaAPI`` (``api``) with each resource's router, mounted
at ``/api/``; the OpenAPI document is at ``/api/openapi.json``, the docs at ``/api/docs``."""

# No `from __future__ import annotations`: django-ninja reads the annotations at runtime.
from typing import Any

from django.urls import path
from ninja import NinjaAPI
from ninja.operation import Operation

from portal.api import decisions, follow, interrupts, requests, threads
from portal.api.auth import BearerToken
from portal.api.errors import COMMON_REFUSALS, add_handlers
from portal.api.throttle import TokenRateThrottle


class PortalApi(NinjaAPI):
    """The API, documented with every answer it gives: the refusals every endpoint may
    give (``COMMON_REFUSALS``, all in the ``Problem`` shape) are added to each operation,
    and an operation marked ``x-event-stream`` documents its 200 body as what it is,
    ``text/event-stream`` (its schema describes one event), not JSON."""

    def get_openapi_schema(self, **kwargs: Any) -> Any:
        schema = super().get_openapi_schema(**kwargs)
        problem = {"$ref": "#/components/schemas/Problem"}
        for operations in schema["paths"].values():
            for operation in operations.values():
                responses = operation["responses"]
                for status, description in COMMON_REFUSALS.items():
                    if status not in responses and str(status) not in responses:
                        responses[status] = {
                            "description": description,
                            "content": {self.renderer.media_type: {"schema": problem}},
                        }
                if not operation.get("x-event-stream"):
                    continue
                for status, response in responses.items():
                    if str(status) == "200":
                        body = response["content"].pop(self.renderer.media_type)
                        response["content"]["text/event-stream"] = body
        return schema

    def get_openapi_operation_id(self, operation: Operation) -> str:
        # The ids clients were given when every endpoint but the outside agents' lived in
        # one module, portal.api; kept whichever module holds the view now.
        view = operation.view_func
        module = view.__module__ if view.__module__ == requests.__name__ else "portal.api"
        return f"{module}_{view.__name__}".replace(".", "_")


api = PortalApi(
    title="Reviewer portal API",
    version="1",
    description=(
        "List and answer the requests agents raise, start threads and read them. "
        "Authenticate with `Authorization: Bearer <token>` (`manage.py create_api_token`). "
        "Tokens carry scopes: `read` for the GET endpoints, `start` to start, retry and "
        "cancel threads and withdraw their requests, `decide` to claim, release and "
        "answer requests, `request` for an outside agent to raise them (`/api/requests`). "
        "Lists return at most 100 items a page; `/threads` and `/decisions` page by the `next` "
        "cursor. `GET /threads/{thread_id}`, `POST /threads` and `POST "
        "/threads/{thread_id}/resume` take `wait` (seconds, at most 30): the answer comes "
        "once the thread's run has paused or finished, instead of being polled for. Every "
        "refusal has the body `{detail, errors}`. Too many requests with one "
        "token get 429 and Retry-After."
    ),
    auth=BearerToken(),
    throttle=[TokenRateThrottle()],
    urls_namespace="api",
)
add_handlers(api)
api.add_router("/interrupts", interrupts.router)
api.add_router("/threads", threads.router)
api.add_router("/threads", follow.router)
api.add_router("/decisions", decisions.router)
api.add_router("/requests", requests.router)

urlpatterns = [path("api/", api.urls)]
