"""A full-text index on what the customer wrote, for the history's search (PostgreSQL).

The history's search looks in a request's message and payload (0003/0011) and in the
user messages of its conversation. This index holds the words of those messages only, and
only for the checkpoints that carry one (a start or a follow-up), so the steps an agent
writes pay nothing but the WHERE. The expression must stay the same as
``portal/audit/history.py`` ``_CustomerSaid``: the planner uses it only when they are equal.
"""

from django.db import migrations

from portal.migrations._indexes import swap_index

NAME = "portal_checkpoint_customer_words"
SPEC = (
    "USING gin (jsonb_to_tsvector('simple'::regconfig, "
    "jsonb_path_query_array(messages, '$[*] ? (@.role == \"user\").content'), "
    '\'["string"]\')) WHERE messages @> \'[{"role": "user"}]\''
)


def _create(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        swap_index(schema_editor, table="portal_checkpoint", name=NAME, spec=SPEC)


def _drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {NAME}")


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY cannot run inside a transaction

    dependencies = [
        ("portal", "0031_external_request_source"),
    ]

    operations = [migrations.RunPython(_create, _drop)]
