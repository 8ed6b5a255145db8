"""``Interrupt.summary``: what the agent wants, in one plain line, beside the message.

Requests recorded before this column existed keep it empty (the pages then show the
message alone). On PostgreSQL a constant default makes the new column a catalogue change,
not a rewrite. SQLite rebuilds the table to add it, keeping only the indexes the models
declare, so 0005's arrivals index is put back (as 0020 does).
"""

from django.db import migrations, models


def _created_index(apps, schema_editor):
    schema_editor.execute(
        "CREATE INDEX IF NOT EXISTS portal_interrupt_created ON portal_interrupt (created_at)"
    )


class Migration(migrations.Migration):
    dependencies = [
        ("portal", "0021_notifications"),
    ]

    operations = [
        migrations.RunPython(migrations.RunPython.noop, _created_index),
        migrations.AddField(
            model_name="interrupt",
            name="summary",
            field=models.CharField(blank=True, db_default="", default="", max_length=200),
        ),
        migrations.RunPython(_created_index, migrations.RunPython.noop),
    ]
