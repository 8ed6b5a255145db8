"""Keyset paging (portal/models/paging.py), the one implementation behind the queue, the thread
list and the decision history."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from portal.models import Thread, paging
from portal.models.paging import Cursor

pytestmark = pytest.mark.django_db

NOON = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def test_a_cursor_survives_its_own_encoding_with_each_kind_of_id():
    pk = uuid.uuid4()
    assert Cursor.decode(Cursor(NOON, pk).encode(), uuid.UUID) == Cursor(NOON, pk)
    assert Cursor.decode(Cursor(NOON, 42).encode(), int) == Cursor(NOON, 42)
    assert Cursor.decode(Cursor(NOON, "int_abc").encode()) == Cursor(NOON, "int_abc")


@pytest.mark.parametrize(
    "raw",
    [
        None,
        "",
        "garbage",
        "~",
        "2026-03-01T12:00:00+00:00~",  # no id
        "not-a-date~x",
        "2026-03-01T12:00:00~x",  # no time zone: ambiguous, so not ours
        "2026-13-01T12:00:00+00:00~x",
        "0001-01-01T00:00:00+05:00~1",  # before year 1 in UTC
        "9999-12-31T23:59:59-05:00~1",  # after year 9999 in UTC
    ],
)
def test_anything_but_an_encoded_cursor_decodes_to_none(raw):
    assert Cursor.decode(raw) is None


def test_an_id_of_the_wrong_kind_decodes_to_none():
    assert Cursor.decode(Cursor(NOON, "x").encode(), int) is None
    assert Cursor.decode(Cursor(NOON, "x").encode(), uuid.UUID) is None


def _threads(n: int, *, same_time: int) -> list[Thread]:
    # ``same_time`` of them share one updated_at, so only the id orders them.
    made = []
    for i in range(n):
        thread = Thread.objects.create(agent="echo", title=f"t{i}")
        at = NOON if i < same_time else NOON + timedelta(minutes=i)
        Thread.objects.filter(pk=thread.pk).update(updated_at=at)
        made.append(thread)
    return made


@pytest.mark.parametrize("descending", [True, False])
def test_pages_walk_every_row_once_in_order_even_where_times_tie(descending):
    _threads(7, same_time=4)
    order = ["-updated_at", "-id"] if descending else ["updated_at", "id"]
    expected = list(Thread.objects.order_by(*order).values_list("pk", flat=True))
    seen, cursor, pages = [], None, 0
    while True:
        items, more = paging.page(
            Thread.objects.all(), cursor, field="updated_at", descending=descending, size=3
        )
        seen += [t.pk for t in items]
        pages += 1
        if not more:
            break
        cursor = Cursor.of(items[-1], "updated_at")
    assert seen == expected
    assert pages == 3


def test_a_page_of_values_rows_gives_its_cursor_too():
    _threads(2, same_time=0)
    rows, more = paging.page(
        Thread.objects.values("id", "updated_at"), None, field="updated_at", descending=True, size=1
    )
    assert more
    assert Cursor.of(rows[0], "updated_at") == Cursor(rows[0]["updated_at"], rows[0]["id"])


@pytest.mark.parametrize("after", ["0001-01-01T00:00:00+05:00~1", "9999-12-31T23:59:59-05:00~1"])
@pytest.mark.parametrize("name", ["history", "audit_trail", "threads", "queue"])
def test_a_hand_made_cursor_out_of_range_shows_the_first_page(client, admin_user, name, after):
    from django.urls import reverse

    client.force_login(admin_user)
    client.raise_request_exception = False
    assert client.get(reverse(name), {"after": after}).status_code == 200


def test_a_hand_made_api_cursor_out_of_range_is_refused_by_name(client, auditor):
    import base64

    from tests.api.test_api import api_for

    after = base64.urlsafe_b64encode(b"0001-01-01T00:00:00+05:00~1").decode().rstrip("=")
    client.raise_request_exception = False
    response = api_for(client, auditor).get("/api/decisions", after=after)
    assert response.status_code == 422, response.content
    assert "after" in response.content.decode()
