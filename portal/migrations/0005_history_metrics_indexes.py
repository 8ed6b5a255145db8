"""Indexes for the metrics page (issue 7), outside the model state like 0003's.

- ``portal_interrupt_created``: requests that arrived in a time range (queue depth).
- ``portal_interrupt_summary`` (PostgreSQL only, a covering index): the agent and the time
  of the request a decision answered, read without visiting the wide interrupt rows when
  the metrics join a range of decisions to their requests.
"""

from django.db import migrations

CREATE = [
    ("any", "CREATE INDEX IF NOT EXISTS portal_interrupt_created ON portal_interrupt (created_at)"),
    (
        "postgresql",
        "CREATE INDEX IF NOT EXISTS portal_interrupt_summary ON portal_interrupt (id) "
        "INCLUDE (agent, created_at)",
    ),
]
DROP = [
    ("any", "DROP INDEX IF EXISTS portal_interrupt_created"),
    ("postgresql", "DROP INDEX IF EXISTS portal_interrupt_summary"),
]


def _run(statements):
    def run(apps, schema_editor):
        vendor = schema_editor.connection.vendor
        for needs, sql in statements:
            if needs in ("any", vendor):
                schema_editor.execute(sql)

    return run


class Migration(migrations.Migration):
    dependencies = [
        ("portal", "0004_api_token"),
    ]

    operations = [migrations.RunPython(_run(CREATE), _run(DROP))]
