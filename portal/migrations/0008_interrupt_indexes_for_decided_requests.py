"""Take the history's and the metrics' indexes off the pause.

A pause inserts its request into ``portal_interrupt``, and the decision (or the resume)
updates that row once, to resolved; PostgreSQL gives the updated row a new entry in every
index either way, since the indexes name the status. The full-text and payload indexes,
the metrics' covering summary and ``interrupt_history`` serve only questions about requests
that have left the queue, so they now hold only those rows (``resolved_at IS NOT NULL``,
set by every path that resolves, cancels or expires a request, in the transaction that
records its decision). A pause no longer tokenises its payload for a search no pending row
can answer, and each request is indexed there once instead of twice. The queries that use
them say ``resolved_at IS NOT NULL`` (``portal.history``, ``portal.metrics``), or imply it.

Also dropped: the ``varchar_pattern_ops`` copy of the primary key that Django adds beside a
``CharField`` key on PostgreSQL for ``LIKE`` lookups; nothing looks requests up by a
prefix of their id.

On PostgreSQL each index is built CONCURRENTLY under a new name and then takes the old
one's place, so the queue keeps taking writes while a large table is indexed (hence a
migration outside a transaction). Backwards, the indexes cover every row again.
"""

from django.db import migrations, models

from portal.migrations._indexes import swap_index

DECIDED = "resolved_at IS NOT NULL"
# (name, what follows ``ON portal_interrupt``): the indexes that hold decided requests only.
INDEXES = [
    (
        "portal_interrupt_fulltext",
        "USING gin (to_tsvector('simple'::regconfig, "
        "COALESCE(\"message\", '') || ' ' || COALESCE((\"value\")::text, '')))",
    ),
    ("portal_interrupt_value_path", 'USING gin ("value" jsonb_path_ops)'),
    ("portal_interrupt_summary", "(id) INCLUDE (agent, created_at)"),
    ("interrupt_history", '("resolved_at" DESC)'),
]
# The one of them SQLite has too (a model index); the others are PostgreSQL's alone.
ON_SQLITE_TOO = {"interrupt_history"}
LIKE = ("portal_interrupt_id_1e3d6b0b_like", "(id varchar_pattern_ops)")


def _indexes(partial: bool):
    def run(apps, schema_editor):
        postgres = schema_editor.connection.vendor == "postgresql"
        where = f" WHERE {DECIDED}" if partial else ""
        for name, spec in INDEXES:
            if postgres or name in ON_SQLITE_TOO:
                swap_index(schema_editor, table="portal_interrupt", name=name, spec=spec + where)
        if postgres:
            name, spec = LIKE
            if partial:
                schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
            else:
                schema_editor.execute(
                    f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {name} ON portal_interrupt {spec}"
                )

    return run


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY cannot run inside a transaction

    dependencies = [
        ("portal", "0007_checkpoint_time_from_the_runtime"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveIndex(model_name="interrupt", name="interrupt_history"),
                migrations.AddIndex(
                    model_name="interrupt",
                    index=models.Index(
                        condition=models.Q(resolved_at__isnull=False),
                        fields=["-resolved_at"],
                        name="interrupt_history",
                    ),
                ),
            ],
            database_operations=[migrations.RunPython(_indexes(True), _indexes(False))],
        ),
    ]
