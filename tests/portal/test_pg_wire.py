"""``portal.pg.fetch_first``: the checkpointer's write sent through libpq on the worker's
connection. Each refusal must be psycopg's own exception, and a connection left in an
unknown state must not be used again."""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import UTC, datetime

import psycopg
import pytest
from asgiref.sync import async_to_sync

from portal import pg

ECHO = pg.Statement.of(
    "SELECT %(thread)s::text, %(seq)s + 1, %(at)s::text, %(text)s, %(thread)s IS NULL, "
    "%(none)s::text",
    {"thread": pg.UUID, "seq": pg.INT4, "at": pg.TIMESTAMPTZ},
)


PARAMS = {
    "thread": uuid.UUID(int=7),
    "seq": 41,
    "at": datetime(2026, 11, 30, 8, 0, tzinfo=UTC),
    "text": "hello",
    "none": None,
}


def test_a_statement_numbers_each_name_once_in_the_order_it_first_appears():
    assert ECHO.sql == (b"SELECT $1::text, $2 + 1, $3::text, $4, $1 IS NULL, $5::text")
    assert ECHO.params == ("thread", "seq", "at", "text", "none")
    assert ECHO.types == (pg.UUID, pg.INT4, pg.TIMESTAMPTZ, pg.UNKNOWN, pg.UNKNOWN)
    # Two different statements never share a prepared name.
    assert pg.Statement.of("SELECT 1", {}).name != pg.Statement.of("SELECT 2", {}).name


def test_a_statement_with_another_placeholder_style_is_refused():
    with pytest.raises(ValueError, match="placeholder other than"):
        pg.Statement.of("SELECT %s", {})


def test_parameters_are_sent_as_text_and_what_has_no_text_form_is_refused():
    params = {**PARAMS, "text": "é"}
    assert ECHO.values(params, "utf-8") == [
        b"00000000-0000-0000-0000-000000000007",
        b"41",
        b"2026-11-30T08:00:00+00:00",
        "é".encode(),
        None,
    ]
    # Text goes in the connection's encoding, whatever the server's default.
    assert ECHO.values(params, "latin-1")[3] == b"\xe9"
    with pytest.raises(ValueError, match="parameter 'at': a naive datetime"):
        ECHO.values({**params, "at": datetime(2026, 11, 30, 8, 0)}, "utf-8")
    with pytest.raises(TypeError, match="parameter 'seq': no text form for a value of type float"):
        ECHO.values({**params, "seq": 1.5}, "utf-8")
    with pytest.raises(TypeError, match="type bool"):
        ECHO.values({**params, "seq": True}, "utf-8")
    # libpq would cut the text at the NUL, and nobody would know.
    with pytest.raises(ValueError, match="parameter 'text': PostgreSQL text cannot contain NUL"):
        ECHO.values({**params, "text": "abc\x00def"}, "utf-8")
    with pytest.raises(ValueError, match="parameter 'text': 'latin-1' codec"):
        ECHO.values({**params, "text": "€"}, "latin-1")


async def _connect(**kwargs):
    return await psycopg.AsyncConnection.connect(**pg.connect_kwargs(), autocommit=True, **kwargs)


@pytest.mark.postgres
def test_the_first_row_comes_back_typed_as_a_cursor_types_it_prepared_once(transactional_db):
    async def scenario():
        conn = await _connect()
        try:
            first = await pg.fetch_first(conn, ECHO, PARAMS)
            again = await pg.fetch_first(conn, ECHO, {**PARAMS, "seq": 1})
            cursor = await conn.execute(
                "SELECT count(*) FROM pg_prepared_statements WHERE name = %s",
                [ECHO.name.decode()],
            )
            prepared = (await cursor.fetchone())[0]
            empty = await pg.fetch_first(conn, pg.Statement.of("SELECT 1 WHERE false", {}), {})
        finally:
            await conn.close()
        return first, again, prepared, empty

    first, again, prepared, empty = async_to_sync(scenario)()
    assert first == [
        "00000000-0000-0000-0000-000000000007",
        42,
        "2026-11-30 08:00:00+00",
        "hello",
        "f",
        None,
    ]
    assert again[1] == 2
    assert prepared == 1
    assert empty == []


@pytest.mark.postgres
def test_a_server_error_is_psycopgs_exception_and_the_connection_goes_on(transactional_db):
    divide = pg.Statement.of("SELECT 1 / %(seq)s", {"seq": pg.INT4})

    async def scenario():
        conn = await _connect()
        try:
            with pytest.raises(psycopg.errors.DivisionByZero, match="division by zero"):
                await pg.fetch_first(conn, divide, {"seq": 0})
            return await pg.fetch_first(conn, divide, {"seq": 1}), conn.closed
        finally:
            await conn.close()

    assert async_to_sync(scenario)() == ([1], False)


@pytest.mark.postgres
def test_a_statement_deallocated_behind_its_back_is_prepared_again(transactional_db):
    async def scenario():
        conn = await _connect()
        try:
            await pg.fetch_first(conn, ECHO, PARAMS)
            await conn.execute("DEALLOCATE ALL")
            return await pg.fetch_first(conn, ECHO, PARAMS)
        finally:
            await conn.close()

    assert async_to_sync(scenario)()[1] == 42


@pytest.mark.postgres
def test_work_given_for_meanwhile_runs_once_while_the_server_has_the_statement(
    transactional_db, caplog
):
    """Once per statement, after it is sent and before its result is read, even when the
    statement is prepared again; an exception in it is logged and the statement goes on."""
    slow = pg.Statement.of("SELECT pg_sleep(0.2), %(seq)s + 1", {"seq": pg.INT4})
    calls = []

    def meanwhile():
        calls.append(time.monotonic())
        if len(calls) == 3:
            raise RuntimeError("rendering went wrong")

    async def scenario():
        conn = await _connect()
        try:
            started = time.monotonic()
            first = await pg.fetch_first(conn, slow, {"seq": 1}, meanwhile=meanwhile)
            elapsed = time.monotonic() - started
            await conn.execute("DEALLOCATE ALL")  # the next is refused, then prepared again
            second = await pg.fetch_first(conn, slow, {"seq": 2}, meanwhile=meanwhile)
            third = await pg.fetch_first(conn, slow, {"seq": 3}, meanwhile=meanwhile)
            return started, elapsed, [first[1], second[1], third[1]]
        finally:
            await conn.close()

    started, elapsed, answers = async_to_sync(scenario)()
    assert answers == [2, 3, 4]
    assert len(calls) == 3
    assert calls[0] - started < elapsed - 0.15  # it ran while the server slept
    assert "work done while a statement ran failed" in caplog.text


@pytest.mark.postgres
def test_a_connection_that_must_not_prepare_sends_unnamed_statements(transactional_db):
    async def scenario():
        conn = await _connect(prepare_threshold=None)
        try:
            row = await pg.fetch_first(conn, ECHO, PARAMS)
            cursor = await conn.execute("SELECT count(*) FROM pg_prepared_statements")
            return row, (await cursor.fetchone())[0]
        finally:
            await conn.close()

    row, prepared = async_to_sync(scenario)()
    assert row[1] == 42 and prepared == 0


@pytest.mark.postgres
def test_a_statement_cancelled_in_flight_closes_its_connection(transactional_db):
    """Nobody can tell whether a statement cancelled in flight committed, and the connection
    still owes its result: it is closed, not reused (the worker then opens another)."""
    slow = pg.Statement.of("SELECT pg_sleep(%(seconds)s)", {})

    async def scenario():
        conn = await _connect()
        task = asyncio.ensure_future(pg.fetch_first(conn, slow, {"seconds": "5"}))
        await asyncio.sleep(0.2)
        task.cancel()
        started = asyncio.get_running_loop().time()
        with pytest.raises(asyncio.CancelledError):
            await task
        took = asyncio.get_running_loop().time() - started
        return conn.closed, took

    closed, took = async_to_sync(scenario)()
    assert closed and took < 1


@pytest.mark.postgres
def test_a_connection_cut_by_the_server_raises_operational_error(transactional_db):
    """What the worker takes for its own connection failing (``_connection_failed``)."""

    async def scenario():
        conn = await _connect()
        other = await _connect()
        try:
            await pg.fetch_first(conn, ECHO, PARAMS)
            await other.execute("SELECT pg_terminate_backend(%s)", [conn.info.backend_pid])
            with pytest.raises(psycopg.OperationalError):
                await pg.fetch_first(conn, ECHO, PARAMS)
        finally:
            await other.close()
            await conn.close()

    async_to_sync(scenario)()


@pytest.mark.postgres
def test_text_goes_both_ways_in_the_connections_encoding(transactional_db):
    async def scenario():
        conn = await _connect(client_encoding="LATIN1")
        try:
            return await pg.fetch_first(conn, ECHO, {**PARAMS, "text": "café"})
        finally:
            await conn.close()

    assert async_to_sync(scenario)()[3] == "café"


@pytest.mark.postgres
def test_a_statement_whose_table_a_migration_changed_is_prepared_again(transactional_db):
    """After ALTER TABLE the server refuses the old plan ("cached plan must not change
    result type") before running any of it: prepared again, the statement runs."""
    select = pg.Statement.of("SELECT title FROM wire_scratch WHERE id = %(seq)s", {"seq": pg.INT4})

    async def scenario():
        conn = await _connect()
        try:
            await conn.execute("CREATE TEMP TABLE wire_scratch (id int, title varchar(5))")
            await conn.execute("INSERT INTO wire_scratch VALUES (1, 'mug')")
            before = await pg.fetch_first(conn, select, {"seq": 1})
            await conn.execute("ALTER TABLE wire_scratch ALTER COLUMN title TYPE varchar(9)")
            return before, await pg.fetch_first(conn, select, {"seq": 1})
        finally:
            await conn.close()

    assert async_to_sync(scenario)() == (["mug"], ["mug"])


@pytest.mark.postgres
def test_every_row_comes_back(transactional_db):
    series = pg.Statement.of(
        "SELECT g, (2 * g)::bigint, NULL FROM generate_series(1, %(seq)s) g", {"seq": pg.INT4}
    )

    async def scenario():
        conn = await _connect()
        try:
            return await pg.fetch(conn, series, {"seq": 3}), await pg.fetch(
                conn, series, {"seq": 0}
            )
        finally:
            await conn.close()

    assert async_to_sync(scenario)() == ([[1, 2, None], [2, 4, None], [3, 6, None]], [])


@pytest.mark.postgres
def test_the_worker_connection_still_loads_threads_after_a_migration(transactional_db):
    """A deploy may migrate while workers run: a load prepared before ALTER TABLE is
    prepared again rather than refused until the worker restarts."""
    from agents.checkpoint import CheckpointWrite, ThreadStatus
    from portal.checkpointer import DjangoCheckpointer, aconnect
    from portal.models import Thread

    thread = Thread.objects.create(agent="refunds", title="Broken mug")
    write = CheckpointWrite(
        status=ThreadStatus.DONE, next_node=None, new_messages=[{"role": "user", "content": "hi"}]
    )

    async def scenario():
        conn, migrating = await aconnect(), await _connect()
        store = DjangoCheckpointer(connection=conn)
        alter = "ALTER TABLE portal_thread ALTER COLUMN title TYPE varchar({})"
        try:
            await store.aput(str(thread.pk), write, parent_seq=None)
            for _ in range(6):  # (psycopg would prepare it at the fifth)
                await store.aget(str(thread.pk))
            # On another connection, as a deploy's migration runs.
            await migrating.execute(alter.format(201))
            try:
                return await store.aget(str(thread.pk))
            finally:
                await migrating.execute(alter.format(200))
        finally:
            await store.aclose()
            await conn.close()
            await migrating.close()

    snapshot = async_to_sync(scenario)()
    assert (snapshot.seq, snapshot.messages[0]["content"]) == (1, "hi")
