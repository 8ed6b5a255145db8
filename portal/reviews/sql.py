"""The SQL of ``portal.reviews``, by name: the columns read with a request's row lock, and
the switched-on rules.

A decision locks the request and, in the same statement, reads what its checks need of
other rows: the thread's newest checkpoint, the steps an in-tool question's call is in,
whether the reviewer wrote into the thread. As ORM subqueries these cost Django more CPU
to build and compile on every decision than the rest of the locking read; written out as
``RawSQL`` annotations they cost almost nothing to compile
(docs/benchmarks.md, "An approval's locking read"). A rule's decision annotates its own
ORM query with them; a person's decision reads the request in ``LOCKED_REQUEST``, the
locking read itself written out, which costs the web process less again than the ORM's
query did to compose, compile and load.

Each is a correlated subquery of a query over ``portal_interrupt`` that does not alias
that table (the ORM's own queries do not); the table names are the models' default ones.
Values are bound as parameters, never formatted in.

Every pause also reads the switched-on rules (``SWITCHED_ON_RULES``), most often to find
none: as an ORM query, with its two joins and its ordering, compiling it cost the worker
more CPU than anything else it does for a pause outside the graph.
"""

from typing import Any

from django.db import models
from django.db.models.expressions import RawSQL

_LATEST_CHECKPOINT = """
SELECT c.{column} FROM portal_checkpoint c WHERE c.thread_id = portal_interrupt.thread_id
ORDER BY c.seq DESC LIMIT 1
"""

_ASKING_STEP = """
SELECT c.messages FROM portal_checkpoint c
WHERE c.thread_id = portal_interrupt.thread_id AND c.seq = portal_interrupt.checkpoint_seq - %s
"""

# The request with its thread and who claimed it ({request}, {thread} and {claimer} are
# the models' columns), and {columns}, the annotations above; {lock} is FOR UPDATE OF the
# request's row where the database has it (SQLite's BEGIN IMMEDIATE locks instead).
LOCKED_REQUEST = """
SELECT {request}, {thread}, {claimer}, {columns}
FROM portal_interrupt
JOIN portal_thread t ON t.id = portal_interrupt.thread_id
LEFT JOIN {user_table} u ON u.id = portal_interrupt.claimed_by_id
WHERE portal_interrupt.id = %s
{lock}
"""

# The switched-on rules, each with its active version, in the order they are tried:
# {rule} and {version} are the models' columns.
SWITCHED_ON_RULES = """
SELECT {rule}, {version}
FROM portal_rule r JOIN portal_ruleversion v ON v.id = r.active_version_id
WHERE r.enabled
ORDER BY r.position, r.id
"""

_WROTE_INTO_THREAD = """
EXISTS (SELECT 1 FROM portal_run r WHERE r.thread_id = portal_interrupt.thread_id
        AND r.author_id = %s)
"""


def latest_checkpoint(column: str) -> Any:
    """The thread's newest checkpoint's ``column``: ``status`` or ``interrupt_id``."""
    if column not in ("status", "interrupt_id"):
        raise ValueError(f"not a checkpoint column read with the lock: {column!r}")
    query = _LATEST_CHECKPOINT.format(column=column)
    return RawSQL(query, (), output_field=models.CharField())  # noqa: S611 (a constant)


def asking_step(back: int) -> Any:
    """The messages of the step ``back`` steps before the one the request paused in."""
    return RawSQL(_ASKING_STEP, (back,), output_field=models.JSONField())  # noqa: S611


def wrote_into_thread(user_id: Any) -> Any:
    """Whether user ``user_id`` wrote a run into the request's thread."""
    return RawSQL(_WROTE_INTO_THREAD, (user_id,), output_field=models.BooleanField())  # noqa: S611
