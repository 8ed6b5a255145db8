"""Cancelling and retrying threads, and approvals by several reviewers.

- ``Thread.cancelled_at`` / ``cancelled_by``: who stopped a thread for good and when; the
  checkpointer refuses every write to a thread that has it. ``cancelled`` joins the thread
  and run statuses.
- The ``retry_thread`` and ``cancel_thread`` permissions: retry or cancel anyone's thread
  (owners act on their own). No group gets them; grant them in the admin.
- ``Approval``: one reviewer's vote on a request that needs several, one per reviewer per
  request (a unique constraint), append-only like decisions: on PostgreSQL triggers refuse
  UPDATE, DELETE and TRUNCATE, as 0003 and 0015 do for ``portal_decision``.

On PostgreSQL the new nullable columns are catalogue changes, not rewrites.
"""

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models

APPEND_ONLY = """
CREATE OR REPLACE FUNCTION portal_approval_refuse_change() RETURNS trigger AS $$
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        IF (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
            RETURN NULL;
        END IF;
        RAISE EXCEPTION 'portal_approval is append-only: TRUNCATE refused'
            USING ERRCODE = 'integrity_constraint_violation',
                  HINT = 'Approvals are an audit record; they are never removed.';
    END IF;
    RAISE EXCEPTION 'portal_approval is append-only: % of approval % refused', TG_OP, OLD.id
        USING ERRCODE = 'integrity_constraint_violation',
              HINT = 'Approvals are an audit record; they are written once.';
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER portal_approval_append_only
    BEFORE UPDATE OR DELETE ON portal_approval
    FOR EACH ROW EXECUTE FUNCTION portal_approval_refuse_change();
CREATE TRIGGER portal_approval_no_truncate
    BEFORE TRUNCATE ON portal_approval
    FOR EACH STATEMENT EXECUTE FUNCTION portal_approval_refuse_change();
"""
ALLOW_CHANGES = """
DROP TRIGGER IF EXISTS portal_approval_append_only ON portal_approval;
DROP TRIGGER IF EXISTS portal_approval_no_truncate ON portal_approval;
DROP FUNCTION IF EXISTS portal_approval_refuse_change();
"""


def _postgres(sql):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(sql, params=None)

    return run


class Migration(migrations.Migration):
    dependencies = [
        ("portal", "0028_interrupt_summary"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="Approval",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "outcome",
                    models.CharField(
                        choices=[
                            ("approved", "Approved"),
                            ("rejected", "Rejected"),
                            ("edited", "Edited"),
                            ("expired", "Expired"),
                            ("cancelled", "Cancelled"),
                            ("responded", "Responded"),
                            ("ignored", "Ignored"),
                        ],
                        max_length=16,
                    ),
                ),
                ("value", models.JSONField(blank=True, null=True)),
                ("note", models.TextField(blank=True)),
                (
                    "created_at",
                    models.DateTimeField(default=django.utils.timezone.now, editable=False),
                ),
                ("payload_hash", models.CharField(blank=True, max_length=64)),
                ("prev_hash", models.CharField(blank=True, max_length=64)),
                ("hash", models.CharField(blank=True, max_length=64)),
            ],
        ),
        migrations.AlterModelOptions(
            name="thread",
            options={
                "permissions": [
                    ("start_thread", "Can start conversations"),
                    ("view_all_threads", "Can see every thread"),
                    ("retry_thread", "Can retry anyone's failed thread"),
                    ("cancel_thread", "Can cancel anyone's thread"),
                ]
            },
        ),
        migrations.AddField(
            model_name="thread",
            name="cancelled_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="thread",
            name="cancelled_by",
            field=models.ForeignKey(
                blank=True,
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="cancelled_threads",
                to=settings.AUTH_USER_MODEL,
            ),
        ),
        migrations.AlterField(
            model_name="run",
            name="status",
            field=models.CharField(
                choices=[
                    ("queued", "Queued"),
                    ("running", "Running"),
                    ("interrupted", "Interrupted"),
                    ("succeeded", "Succeeded"),
                    ("failed", "Failed"),
                    ("cancelled", "Cancelled"),
                ],
                default="queued",
                max_length=16,
            ),
        ),
        migrations.AlterField(
            model_name="thread",
            name="status",
            field=models.CharField(
                choices=[
                    ("idle", "Idle"),
                    ("running", "Running"),
                    ("interrupted", "Interrupted"),
                    ("done", "Done"),
                    ("failed", "Failed"),
                    ("cancelled", "Cancelled"),
                ],
                default="idle",
                max_length=16,
            ),
        ),
        migrations.AddIndex(
            model_name="thread",
            index=models.Index(
                condition=models.Q(("cancelled_by__isnull", False)),
                fields=["cancelled_by"],
                name="thread_cancelled_by",
            ),
        ),
        migrations.AddField(
            model_name="approval",
            name="interrupt",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="approvals",
                to="portal.interrupt",
            ),
        ),
        migrations.AddField(
            model_name="approval",
            name="reviewer",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.PROTECT,
                related_name="approvals",
                to=settings.AUTH_USER_MODEL,
            ),
        ),
        migrations.AddConstraint(
            model_name="approval",
            constraint=models.UniqueConstraint(
                fields=("interrupt", "reviewer"), name="approval_one_per_reviewer"
            ),
        ),
        migrations.RunPython(_postgres(APPEND_ONLY), _postgres(ALLOW_CHANGES)),
    ]
