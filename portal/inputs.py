"""Input no view can take, refused at the door (``refuse_bad_input``, a middleware).

More in docs/architecture.md (`inputs.py`)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from datetime import date
from typing import Any

from asgiref.sync import iscoroutinefunction, sync_to_async
from django import forms
from django.conf import settings
from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.utils.decorators import sync_and_async_middleware

from agents.schema import json_problem, loads, text_problem
from portal.errors import InputError

API_PREFIX = "/api/"
_BODY_METHODS = ("POST", "PUT", "PATCH", "DELETE")

Refusal = tuple[int, str, list[str]]

FIRST_DAY, LAST_DAY = date(1900, 1, 1), date(9998, 12, 31)


class DayField(forms.DateField):
    """A day for a date filter. Filters turn a day into [its start, the next day's start)
    in the local time zone, so the day after it must exist: 9999-12-31 has none."""

    def validate(self, value: Any) -> None:
        super().validate(value)
        if value is not None and not FIRST_DAY <= value <= LAST_DAY:
            raise forms.ValidationError(f"Pick a day between {FIRST_DAY} and {LAST_DAY}.")


def _pairs_problem(pairs: Any, where: str) -> Refusal | None:
    for key, values in pairs.lists():
        for text in (key, *values):
            if isinstance(text, str) and (problem := text_problem(text)) is not None:
                line = f"{where} {key!r}: {problem}"
                return 400, f"The {line}; send it without that character.", [line]
    return None


def _too_large() -> Refusal:
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    line = f"body: over the limit of {limit} bytes"
    return 413, f"The request is too large ({line}); send less.", [line]


def _form_problem(request: HttpRequest) -> Refusal | None:
    try:
        return _pairs_problem(request.POST, "form field")
    except RequestDataTooBig:
        return _too_large()
    except TooManyFieldsSent:
        limit = settings.DATA_UPLOAD_MAX_NUMBER_FIELDS
        line = f"body: over the limit of {limit} form fields"
        return 400, f"The form has too many fields ({line}).", [line]


def _body_problem(request: HttpRequest) -> Refusal | None:
    if request.content_type == "multipart/form-data":
        return _form_problem(request)  # parsed as a stream: files do not count to the limit
    try:
        body = request.body
    except RequestDataTooBig:
        return _too_large()
    # The API (django-ninja) parses a body as JSON whatever its content type says, so
    # every body under /api/ is checked as JSON too.
    api = request.path_info.startswith(API_PREFIX)
    if request.content_type == "application/x-www-form-urlencoded":
        if (refused := _form_problem(request)) is not None or not api:
            return refused
    if body and (api or request.content_type == "application/json"):
        try:
            loads(body)
        except json.JSONDecodeError:
            return None  # not JSON at all: the view says so in its own words
        except ValueError as exc:
            line = f"body: {exc}"
            return 400, f"The request body is not JSON this server accepts ({exc}).", [line]
    return None


def refusal_for(request: HttpRequest) -> Refusal | None:
    """(status, message, error lines) when the request cannot be taken, else None."""
    if (problem := text_problem(request.path_info)) is not None:
        line = f"address: {problem}"
        return 400, f"The address {problem}; check the link.", [line]
    if (refused := _pairs_problem(request.GET, "query parameter")) is not None:
        return refused
    if request.method in _BODY_METHODS:
        return _body_problem(request)
    return None


def refused_response(request: HttpRequest, refusal: Refusal) -> HttpResponse:
    status, detail, errors = refusal
    if request.path_info.startswith(API_PREFIX):
        # The JSON API's refusal shape (portal.api).
        return JsonResponse({"detail": detail, "errors": errors}, status=status)
    context = {"status": status, "detail": detail, "errors": errors}
    return render(request, "portal/refused.html", context, status=status)


Handler = Callable[[HttpRequest], Any]


@sync_and_async_middleware
def refuse_bad_input(get_response: Handler) -> Handler:
    """Answer 400/413 for input no view can take; see the module docstring."""
    if iscoroutinefunction(get_response):

        async def middleware_async(request: HttpRequest) -> HttpResponse:
            refusal = refusal_for(request)  # reads the body and parses; no database
            if refusal is not None:
                # The page shows who is logged in: a session read, so not on the loop.
                return await sync_to_async(refused_response)(request, refusal)
            response: Awaitable[HttpResponse] = get_response(request)
            return await response

        return middleware_async

    def middleware(request: HttpRequest) -> HttpResponse:
        refusal = refusal_for(request)
        if refusal is not None:
            return refused_response(request, refusal)
        response: HttpResponse = get_response(request)
        return response

    return middleware


def check_input(data: Any, what: str) -> None:
    """``InputError`` naming the problem unless ``data`` can be stored as a run's input:
    strict JSON within ``PORTAL_MAX_INPUT_BYTES``."""
    # Strict JSON first: NaN, NUL or a lone surrogate would fail at the database instead.
    problem = json_problem(data)
    if problem is not None:
        raise InputError(f"{what} is not JSON data that can be stored: {problem}")
    size = len(json.dumps(data, separators=(",", ":")).encode())
    limit = settings.PORTAL_MAX_INPUT_BYTES
    if size > limit:
        raise InputError(
            f"{what} is {size} bytes of JSON, over the limit of {limit} bytes "
            "(PORTAL_MAX_INPUT_BYTES); send a shorter message"
        )
