"""``Interrupt.tool``: the name of the tool whose call raised the request.

An ``interrupt()`` inside a tool names only its call id, so the history's tool filter and
the exports' ``tools`` column could not find ``issue_refund``'s approvals. Requests
recorded before this column existed keep it empty.

On PostgreSQL a constant default makes the new column a catalogue change, not a rewrite.
SQLite rebuilds the table to add it, keeping only the indexes the models declare, so
0005's arrivals index is put back (as 0011 does).
"""

from django.db import migrations, models


def _created_index(apps, schema_editor):
    schema_editor.execute(
        "CREATE INDEX IF NOT EXISTS portal_interrupt_created ON portal_interrupt (created_at)"
    )


class Migration(migrations.Migration):
    dependencies = [
        ("portal", "0017_decision_outcomes_responded_ignored"),
    ]

    operations = [
        migrations.RunPython(migrations.RunPython.noop, _created_index),
        migrations.AddField(
            model_name="interrupt",
            name="tool",
            field=models.CharField(blank=True, db_default="", default="", max_length=128),
        ),
        migrations.RunPython(_created_index, migrations.RunPython.noop),
    ]
