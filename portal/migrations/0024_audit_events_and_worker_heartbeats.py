"""The audit trail of actions (``AuditEvent``) and workers' heartbeats.

``portal_auditevent`` is append-only like ``portal_decision``: on PostgreSQL a row trigger
refuses UPDATE and DELETE, and a statement trigger refuses TRUNCATE for every role but
superusers (the test runner and ``flush`` connect as one; see 0015). ``grant_app_role``
gives the portal's role SELECT and INSERT on it only.

The new permission, ``view_audit_trail``, is created here (Django would only create it
after every migration ran) and granted to whoever audits today: the groups and users that
may browse the history but not decide.
"""

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models

REFUSE = """
CREATE OR REPLACE FUNCTION portal_auditevent_refuse_change() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'portal_auditevent is append-only: % of event % refused', TG_OP, OLD.id
        USING ERRCODE = 'integrity_constraint_violation',
              HINT = 'Audit events are a record; record a new event instead.';
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER portal_auditevent_append_only
    BEFORE UPDATE OR DELETE ON portal_auditevent
    FOR EACH ROW EXECUTE FUNCTION portal_auditevent_refuse_change();

CREATE OR REPLACE FUNCTION portal_auditevent_refuse_truncate() RETURNS trigger AS $$
BEGIN
    IF (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
        RETURN NULL;
    END IF;
    RAISE EXCEPTION 'portal_auditevent is append-only: TRUNCATE refused'
        USING ERRCODE = 'integrity_constraint_violation',
              HINT = 'Audit events are a record; they are never removed.';
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER portal_auditevent_no_truncate
    BEFORE TRUNCATE ON portal_auditevent
    FOR EACH STATEMENT EXECUTE FUNCTION portal_auditevent_refuse_truncate();
"""
ALLOW = """
DROP TRIGGER IF EXISTS portal_auditevent_no_truncate ON portal_auditevent;
DROP FUNCTION IF EXISTS portal_auditevent_refuse_truncate();
DROP TRIGGER IF EXISTS portal_auditevent_append_only ON portal_auditevent;
DROP FUNCTION IF EXISTS portal_auditevent_refuse_change();
"""


def _run(sql: str):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(sql, params=None)

    return run


def grant_to_auditors(apps, schema_editor):
    db = schema_editor.connection.alias
    content_type = apps.get_model("contenttypes", "ContentType")
    permission = apps.get_model("auth", "Permission")
    group = apps.get_model("auth", "Group")
    user = apps.get_model(settings.AUTH_USER_MODEL)
    ct, _ = content_type.objects.using(db).get_or_create(app_label="portal", model="auditevent")
    perm, _ = permission.objects.using(db).get_or_create(
        content_type=ct,
        codename="view_audit_trail",
        defaults={"name": "Can browse the audit trail of actions"},
    )
    for holder_model, through in ((group, "permissions"), (user, "user_permissions")):
        holders = holder_model.objects.using(db).filter(
            **{
                f"{through}__content_type__app_label": "portal",
                f"{through}__codename": "view_history",
            }
        )
        deciders = holder_model.objects.using(db).filter(
            **{
                f"{through}__content_type__app_label": "portal",
                f"{through}__codename": "decide_interrupt",
            }
        )
        for holder in holders.exclude(pk__in=deciders).distinct():
            getattr(holder, through).add(perm)


class Migration(migrations.Migration):
    dependencies = [
        ("portal", "0020_interrupt_tool"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="WorkerHeartbeat",
            fields=[
                ("name", models.CharField(max_length=128, primary_key=True, serialize=False)),
                ("started_at", models.DateTimeField()),
                ("beat_at", models.DateTimeField()),
            ],
        ),
        migrations.CreateModel(
            name="AuditEvent",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "created_at",
                    models.DateTimeField(default=django.utils.timezone.now, editable=False),
                ),
                ("action", models.CharField(max_length=64)),
                ("actor_name", models.CharField(blank=True, max_length=150)),
                ("target_type", models.CharField(blank=True, max_length=32)),
                ("target_id", models.CharField(blank=True, max_length=64)),
                ("detail", models.JSONField(blank=True, default=dict)),
                ("prev_hash", models.CharField(max_length=64)),
                ("hash", models.CharField(max_length=64)),
                (
                    "actor",
                    models.ForeignKey(
                        blank=True,
                        db_constraint=False,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "permissions": [("view_audit_trail", "Can browse the audit trail of actions")],
                "indexes": [
                    models.Index(fields=["-created_at", "-id"], name="auditevent_recent"),
                    models.Index(fields=["action", "-created_at"], name="auditevent_action"),
                    models.Index(fields=["target_type", "target_id"], name="auditevent_target"),
                    models.Index(fields=["actor_name", "-created_at"], name="auditevent_actor"),
                ],
            },
        ),
        migrations.RunPython(_run(REFUSE), _run(ALLOW)),
        migrations.RunPython(grant_to_auditors, migrations.RunPython.noop),
    ]
