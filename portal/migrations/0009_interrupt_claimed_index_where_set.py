"""Index ``Interrupt.claimed_by`` only where it is set.

Every pause inserted a NULL into the foreign key's index, and resolving the request
inserted another (the row's new version gets an entry in every index). Most requests are
never claimed, and what looks requests up by their claimant (a user's deletion clearing
their claims) names one, so a partial index serves it. As in 0006, only the index changes:
AlterField alone would drop and re-add the foreign key, which re-validates the table under
lock. Built CONCURRENTLY on PostgreSQL, so the queue keeps taking writes meanwhile.
"""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

from portal.migrations._indexes import swap_index

OLD = "portal_interrupt_claimed_by_id_da3aef85"
NEW = "interrupt_claimed"


def _swap(forwards: bool):
    def run(apps, schema_editor):
        if forwards:
            spec = "(claimed_by_id) WHERE claimed_by_id IS NOT NULL"
            swap_index(schema_editor, table="portal_interrupt", name=NEW, spec=spec, replaces=OLD)
        else:
            spec = "(claimed_by_id)"
            swap_index(schema_editor, table="portal_interrupt", name=OLD, spec=spec, replaces=NEW)

    return run


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY cannot run inside a transaction

    dependencies = [
        ("portal", "0008_interrupt_indexes_for_decided_requests"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="interrupt",
                    name="claimed_by",
                    field=models.ForeignKey(
                        blank=True,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="claimed_interrupts",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
                migrations.AddIndex(
                    model_name="interrupt",
                    index=models.Index(
                        condition=models.Q(claimed_by__isnull=False),
                        fields=["claimed_by"],
                        name="interrupt_claimed",
                    ),
                ),
            ],
            database_operations=[migrations.RunPython(_swap(True), _swap(False))],
        ),
    ]
