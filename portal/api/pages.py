"""How lists page: requests by limit and offset (``InterruptPage``); threads and decisions
by a keyset cursor (``portal.models.paging``), handed out as an opaque ``next``."""

# No `from __future__ import annotations`: django-ninja reads the annotations at runtime.
import base64
from typing import Any

from django.db.models import QuerySet
from django.http import HttpRequest
from ninja import Field, Schema
from ninja.pagination import LimitOffsetPagination

from portal.api.errors import ApiProblem
from portal.api.schemas import attach_latest_user_messages
from portal.models import Interrupt, paging

# The most requests one page of a list endpoint returns.
API_PAGE_MAX = 100
LIMIT_HELP = (
    f"How many items to return, 1 to {API_PAGE_MAX} (default {API_PAGE_MAX}); a larger "
    "value is refused with 422 naming the maximum."
)
AFTER_HELP = "The `next` value of the previous page: the page after it. Omit it for the first page."


def next_page(cursor: paging.Cursor | None) -> str | None:
    # URL-safe, so a client can paste it into a query string as it is (an ISO time's "+"
    # would otherwise arrive as a space).
    if cursor is None:
        return None
    return base64.urlsafe_b64encode(cursor.encode().encode()).decode().rstrip("=")


def cursor_from(text: str | None, ident: Any) -> paging.Cursor | None:
    if not text:
        return None
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode()
    except (ValueError, UnicodeDecodeError):
        raw = ""
    cursor = paging.Cursor.decode(raw, ident)
    if cursor is None:
        raise ApiProblem(
            422,
            "The cursor is damaged; start again from the first page (omit `after`).",
            ["$.after: not a cursor this API returned"],
        )
    return cursor


API_OFFSET_MAX = 1_000_000


class InterruptPage(LimitOffsetPagination):
    """Limit/offset with ``limit`` capped (a larger one is a 422 naming the maximum), and
    the page's user messages read in one query."""

    class Input(Schema):
        limit: int = Field(
            API_PAGE_MAX,
            ge=1,
            le=API_PAGE_MAX,
            description=f"How many requests to return, at most {API_PAGE_MAX}.",
        )
        # Bounded so that a huge number is a 422 naming the bound, not a database
        # error; past a million rows a client should filter instead.
        offset: int = Field(
            0, ge=0, le=API_OFFSET_MAX, description=f"Rows to skip, at most {API_OFFSET_MAX}."
        )

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(max_limit=API_PAGE_MAX, **kwargs)

    def paginate_queryset(
        self, queryset: QuerySet[Interrupt], pagination: Any, request: HttpRequest, **params: Any
    ) -> Any:
        page = super().paginate_queryset(queryset, pagination, request, **params)
        page["items"] = list(page["items"])
        attach_latest_user_messages(page["items"])
        return page
