"""Every connection the portal opens commits durably, whatever the database or role says:
each one tells a person that something was recorded."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from django.db import connection, connections

from portal.models.db import connect_kwargs

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.fixture(params=["database", "role in database"])
def defaults_to_asynchronous_commit(request) -> Iterator[None]:
    """Turn synchronous_commit off for new connections to the test database only (never
    server-wide), as a careless operator might, and undo it afterwards."""
    db = connection.ops.quote_name(connection.settings_dict["NAME"])
    target = (
        f"DATABASE {db}" if request.param == "database" else f"ROLE CURRENT_USER IN DATABASE {db}"
    )
    with connection.cursor() as cursor:
        cursor.execute(f"ALTER {target} SET synchronous_commit = off")
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"ALTER {target} RESET synchronous_commit")


def test_the_default_in_force_is_off_for_an_unpinned_connection(defaults_to_asynchronous_commit):
    # The premise: without the portal's startup option, a new session would not wait.
    kwargs = {k: v for k, v in connect_kwargs().items() if k != "options"}
    with psycopg.connect(**kwargs) as conn:
        assert conn.execute("SHOW synchronous_commit").fetchone() == ("off",)


def test_a_new_django_connection_commits_synchronously_despite_an_off_default(
    defaults_to_asynchronous_commit,
):
    fresh = connections.create_connection("default")
    try:
        with fresh.cursor() as cursor:
            cursor.execute("SHOW synchronous_commit")
            assert cursor.fetchone() == ("on",)
    finally:
        fresh.close()


def test_the_workers_own_connections_commit_synchronously_despite_an_off_default(
    defaults_to_asynchronous_commit,
):
    # connect_kwargs() opens the worker's LISTEN and checkpoint connections.
    with psycopg.connect(**connect_kwargs()) as conn:
        assert conn.execute("SHOW synchronous_commit").fetchone() == ("on",)
