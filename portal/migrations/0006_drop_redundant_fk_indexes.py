"""Drop two foreign-key indexes that other indexes already cover, so every checkpoint
write maintains two fewer: checkpoint.thread_id (led by the unique (thread, seq)
constraint) and thread.owner_id (led by thread_owner_recent).

Only the indexes go. AlterField alone would also drop and re-add each foreign key, which
re-validates the whole table under lock; the constraints stay as they are."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

INDEXES = [
    ("portal_checkpoint_thread_id_a7df3973", "portal_checkpoint", "thread_id"),
    ("portal_thread_owner_id_7b8afe99", "portal_thread", "owner_id"),
]


class Migration(migrations.Migration):
    dependencies = [
        ("portal", "0005_history_metrics_indexes"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="checkpoint",
                    name="thread",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="checkpoints",
                        to="portal.thread",
                    ),
                ),
                migrations.AlterField(
                    model_name="thread",
                    name="owner",
                    field=models.ForeignKey(
                        blank=True,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="threads",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            database_operations=[
                migrations.RunSQL(
                    f'DROP INDEX IF EXISTS "{name}"',
                    reverse_sql=f'CREATE INDEX "{name}" ON "{table}" ("{column}")',
                )
                for name, table, column in INDEXES
            ],
        ),
    ]
