"""The API's refusals: one body for all of them, ``{"detail": ..., "errors": [...]}``.

``Problem`` is that body's schema and ``ApiProblem`` raises one. ``add_handlers`` answers
the exceptions endpoints raise in that shape; the ``json_refusals`` middleware does the same
for Django's and django-ninja's own 404 and 405 under ``/api/``. ``COMMON_REFUSALS`` are
the refusals every endpoint may give, documented on each operation.
"""

# No `from __future__ import annotations`: django-ninja reads the annotations at runtime.
import math
from typing import Any

from asgiref.sync import iscoroutinefunction
from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils.decorators import sync_and_async_middleware
from ninja import NinjaAPI, Schema
from ninja.errors import AuthenticationError, HttpError, Throttled, ValidationError

from portal.errors import DecisionRefused
from portal.inputs import API_PREFIX


class Problem(Schema):
    detail: str
    errors: list[str] = []


class ApiProblem(HttpError):
    """A refusal with error lines, answered in the common ``{"detail", "errors"}`` shape."""

    def __init__(self, status_code: int, detail: str, errors: list[str] | None = None) -> None:
        super().__init__(status_code, detail)
        self.errors = list(errors or [])


# Refusals any endpoint may answer, whatever its own: documented on every operation.
COMMON_REFUSALS = {
    400: "The request carries input no endpoint takes (a NUL character, JSON that is not "
    "JSON); errors names it.",
    401: "No token, or one that is unknown, expired or revoked; detail says which.",
    403: "The token lacks the scope this endpoint needs, the user's role may not do it, "
    "or the API is turned off; detail says which.",
    422: "A parameter or the body does not have the expected shape; errors has one line "
    "per problem ($.field: what is wrong).",
    429: "Too many requests with this token; Retry-After says when to try again.",
}


def add_handlers(api: NinjaAPI) -> None:
    """Answer the exceptions ``api``'s endpoints raise as ``Problem`` bodies."""

    def refusal(
        request: HttpRequest, status: int, detail: str, errors: list[str] | None = None
    ) -> HttpResponse:
        body = {"detail": detail, "errors": errors or []}
        response: HttpResponse = api.create_response(request, body, status=status)
        return response

    @api.exception_handler(DecisionRefused)
    def on_refused(request: HttpRequest, exc: DecisionRefused) -> HttpResponse:
        return refusal(request, exc.status_code, exc.message, exc.errors)

    @api.exception_handler(HttpError)
    def on_http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
        detail = exc.message
        if isinstance(exc, ApiProblem):
            return refusal(request, exc.status_code, detail, exc.errors)
        if isinstance(exc, Throttled):
            wait = math.ceil(exc.wait) if exc.wait is not None else 1
            response = refusal(
                request,
                429,
                f"Too many requests with this token (the limit is {settings.PORTAL_API_RATE}); "
                f"retry in {wait} s.",
            )
            response["Retry-After"] = str(wait)
            return response
        if isinstance(exc, AuthenticationError):
            detail = (
                "Send a valid token: Authorization: Bearer <token> (manage.py create_api_token)."
            )
        elif exc.status_code == 400 and detail.startswith("Cannot parse request body"):
            detail = "The request body is not valid JSON."
        return refusal(request, exc.status_code, detail)

    @api.exception_handler(ValidationError)
    def on_validation_error(request: HttpRequest, exc: ValidationError) -> HttpResponse:
        lines = [_error_line(e) for e in exc.errors]
        return refusal(request, 422, "The request does not have the expected shape.", lines)


def _error_line(error: dict[str, Any]) -> str:
    loc = [str(part) for part in error.get("loc", ())]
    if loc and loc[0] == "body":
        loc = loc[2:]  # ("body", "<param name>", field, ...)
    elif loc and loc[0] in ("query", "path"):
        loc = loc[1:]
    path = "$" + "".join(f"[{p}]" if p.isdigit() else f".{p}" for p in loc)
    kind = error.get("type", "")
    if kind == "missing":
        return f"{path}: required"
    if kind == "extra_forbidden":
        return f"{path}: unexpected field"
    return f"{path}: {error.get('msg', 'invalid')}"


# --- refusals the API's routes do not make themselves --------------------------------------


def _json_refusal(request: HttpRequest, response: Any) -> Any:
    """An HTML or text 404/405 under /api/ (Django's page for a path no route serves,
    django-ninja's "Method not allowed") as the API's refusal body, saying what to do."""
    if not request.path.startswith(API_PREFIX) or response.status_code not in (404, 405):
        return response
    if response.get("Content-Type", "").startswith("application/json"):
        return response
    if response.status_code == 405:
        allowed = response.get("Allow", "")
        detail = f"{request.method} is not allowed on {request.path}; it takes {allowed}."
    else:
        detail = f"No API endpoint at {request.path}; the endpoints are listed at /api/docs."
    refusal = JsonResponse({"detail": detail, "errors": []}, status=response.status_code)
    if response.has_header("Allow"):
        refusal["Allow"] = response["Allow"]
    return refusal


@sync_and_async_middleware
def json_refusals(get_response: Any) -> Any:
    """Middleware: every refusal under /api/ has the API's body (see ``_json_refusal``)."""
    if iscoroutinefunction(get_response):

        async def middleware_async(request: HttpRequest) -> Any:
            return _json_refusal(request, await get_response(request))

        return middleware_async

    def middleware(request: HttpRequest) -> Any:
        return _json_refusal(request, get_response(request))

    return middleware
