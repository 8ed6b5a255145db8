"""Round trips to PostgreSQL, counted on the wire: libpq's own trace of the connection.

``round_trips()`` traces Django's connection while its block runs and lists each round
trip by what the client sent (``BEGIN``, ``COMMIT`` and ``SAVEPOINT`` included: psycopg
sends them as statements of their own). A round trip ends with the server's ReadyForQuery,
so the count cannot miss a statement that Django's cursor wrappers never see.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator

from django.db import connection
from django.db.backends.postgresql.base import ServerBindingCursor
from psycopg import pq


def _messages(trace: str) -> list[str]:
    """The trace's messages, one a line: a statement written over several lines is traced
    over several, its later lines starting with neither side's mark."""
    messages: list[str] = []
    for line in trace.splitlines():
        if messages and not line.startswith(("F\t", "B\t")):
            messages[-1] += " " + line.strip()
        else:
            messages.append(line)
    return messages


def _statements(trace: str) -> list[str]:
    trips: list[str] = []
    sent: list[str] = []
    for line in _messages(trace):
        parts = line.split("\t")
        if len(parts) < 3:
            continue
        side, kind = parts[0], parts[2]
        text = parts[3].strip() if len(parts) > 3 else ""
        if side == "F" and kind == "Query":
            sent.append(text.strip('"').strip())
        elif side == "F" and kind == "Parse":
            # Parse "<name>" "<sql>" ...: the statement between the second pair of quotes.
            sent.append(text.split('" "', 1)[-1].rsplit('"', 1)[0])
        elif side == "B" and kind == "ReadyForQuery":
            trips.append(" ; ".join(sent) if sent else "(prepared statement)")
            sent = []
    return trips


@contextlib.contextmanager
def round_trips() -> Iterator[list[str]]:
    """The round trips Django's default connection makes inside the block, in order."""
    connection.ensure_connection()
    with traced(connection.connection.pgconn) as trips:
        yield trips


@contextlib.contextmanager
def traced(pgconn: pq.abc.PGconn) -> Iterator[list[str]]:
    """The round trips of ``pgconn`` (any psycopg connection's) inside the block, in order."""
    trips: list[str] = []
    with tempfile.TemporaryFile() as out:
        pgconn.trace(out.fileno())
        pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
        try:
            yield trips
        finally:
            pgconn.untrace()
            out.seek(0)
            trips.extend(_statements(out.read().decode(errors="replace")))


@contextlib.contextmanager
def server_side_binding() -> Iterator[None]:
    """Django's connection binds on the server inside the block, as the ``OPTIONS`` choice
    ``server_side_binding`` makes it (one statement a round trip); closed after, with its
    cursor factory put back, since the pool lends the same connection again."""
    connection.ensure_connection()
    factory = connection.connection.cursor_factory
    connection.connection.cursor_factory = ServerBindingCursor
    try:
        yield
    finally:
        if connection.connection is not None:
            connection.connection.cursor_factory = factory
        connection.close()
