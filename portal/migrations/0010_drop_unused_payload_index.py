"""Drop the payload's ``jsonb_path_ops`` index (0003): no query can use it.

The history's tool filter matches a tool call's name in the payload *or* the request's
node or tool call id, and an OR can use an index only when each of its arms can; the
node and the tool call id have none. So the filter was always answered from the rows the
other conditions select, while every request that left the queue paid for hashing its
payload into this index. PostgreSQL only, CONCURRENTLY: the queue keeps taking writes.
"""

from django.db import migrations

NAME = "portal_interrupt_value_path"


def _run(forwards: bool):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor != "postgresql":
            return
        if forwards:
            schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {NAME}")
        else:
            schema_editor.execute(
                f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {NAME} ON portal_interrupt"
                ' USING gin ("value" jsonb_path_ops) WHERE resolved_at IS NOT NULL'
            )

    return run


class Migration(migrations.Migration):
    atomic = False  # DROP INDEX CONCURRENTLY cannot run inside a transaction

    dependencies = [
        ("portal", "0009_interrupt_claimed_index_where_set"),
    ]

    operations = [migrations.RunPython(_run(True), _run(False))]
