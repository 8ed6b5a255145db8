"""``Interrupt.decided``: the search and the metrics' summary hold decided requests only.

0008 narrowed them to requests that left the queue (``resolved_at IS NOT NULL``). But a
request can leave the queue without a decision: when its thread moves on without one, the
checkpointer takes it out as it writes the thread's next step. The history lists
decisions only, so such a request is never searched, yet that write paid for tokenising
its payload. ``decided`` is set, with the status, by each path that records a decision
(``Interrupt.decided_as``), and filled here from the decisions already recorded; the two
indexes now hold ``decided`` rows only, and the queries that use them say ``decided``.
``interrupt_history`` keeps ``resolved_at``: the metrics count every request that left.

Built CONCURRENTLY under a new name on PostgreSQL, as in 0008.
"""

from django.db import migrations, models

from portal.migrations._indexes import swap_index

FULLTEXT = (
    "USING gin (to_tsvector('simple'::regconfig, "
    "COALESCE(\"message\", '') || ' ' || COALESCE((\"value\")::text, '')))"
)
SUMMARY = "(id) INCLUDE (agent, created_at)"
INDEXES = [("portal_interrupt_fulltext", FULLTEXT), ("portal_interrupt_summary", SUMMARY)]


def _created_index(apps, schema_editor):
    # SQLite adds a column by rebuilding the table, which keeps only the indexes the
    # models declare: 0005's is put back (a no-op where it survived).
    schema_editor.execute(
        "CREATE INDEX IF NOT EXISTS portal_interrupt_created ON portal_interrupt (created_at)"
    )


def _fill(apps, schema_editor):
    schema_editor.execute(
        "UPDATE portal_interrupt SET decided = true"
        " WHERE id IN (SELECT interrupt_id FROM portal_decision) AND NOT decided"
    )


def _indexes(where: str):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor != "postgresql":
            return  # these two indexes are PostgreSQL's alone (0003, 0005)
        for name, spec in INDEXES:
            swap_index(schema_editor, table="portal_interrupt", name=name, spec=f"{spec} {where}")

    return run


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY cannot run inside a transaction

    dependencies = [
        ("portal", "0010_drop_unused_payload_index"),
    ]

    operations = [
        migrations.RunPython(migrations.RunPython.noop, _created_index),
        migrations.AddField(
            model_name="interrupt",
            name="decided",
            field=models.BooleanField(db_default=False, default=False),
        ),
        migrations.RunPython(_created_index, migrations.RunPython.noop),
        migrations.RunPython(_fill, migrations.RunPython.noop),
        migrations.RunPython(_indexes("WHERE decided"), _indexes("WHERE resolved_at IS NOT NULL")),
    ]
