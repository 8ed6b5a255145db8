"""One permission per capability, and the author of every run that carries human messages.

New permissions: claim and take over claims (interrupts), export the history and see the
metrics (decisions). Django creates permissions only after all migrations ran, so this
one creates the new ones itself and grants them to whoever could do the same thing
before: a group or user that may decide may now also claim; one that may browse the
history may also export it and see the metrics. Nothing is granted for ``is_staff``,
which no longer grants anything by itself.

``Run.author`` (who wrote the messages a start or follow-up carries) is null for every
existing run; its index covers only rows where it is set and is built CONCURRENTLY on
PostgreSQL, as in 0009.
"""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

from portal.migrations._indexes import swap_index

# codename -> (model, name, the permission whose holders get it)
NEW_PERMISSIONS = {
    "claim_interrupt": ("interrupt", "Can claim and release interrupts", "decide_interrupt"),
    "take_over_claim": (
        "interrupt",
        "Can take over or release another reviewer's claim",
        None,
    ),
    "export_history": ("decision", "Can export decision history", "view_history"),
    "view_metrics": ("decision", "Can see decision metrics", "view_history"),
}


def grant_like_before(apps, schema_editor):
    db = schema_editor.connection.alias
    content_type = apps.get_model("contenttypes", "ContentType")
    permission = apps.get_model("auth", "Permission")
    group = apps.get_model("auth", "Group")
    user = apps.get_model(settings.AUTH_USER_MODEL)
    for codename, (model, name, like) in NEW_PERMISSIONS.items():
        ct, _ = content_type.objects.using(db).get_or_create(app_label="portal", model=model)
        perm, _ = permission.objects.using(db).get_or_create(
            content_type=ct, codename=codename, defaults={"name": name}
        )
        if like is None:
            continue
        holding = {"permissions__content_type__app_label": "portal", "permissions__codename": like}
        for holder in group.objects.using(db).filter(**holding).distinct():
            holder.permissions.add(perm)
        direct = {
            "user_permissions__content_type__app_label": "portal",
            "user_permissions__codename": like,
        }
        for holder in user.objects.using(db).filter(**direct).distinct():
            holder.user_permissions.add(perm)


def _author_index(forwards: bool):
    def run(apps, schema_editor):
        if forwards:
            spec = "(author_id) WHERE author_id IS NOT NULL"
            swap_index(schema_editor, table="portal_run", name="run_author", spec=spec)
        else:
            schema_editor.execute("DROP INDEX IF EXISTS run_author")

    return run


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY cannot run inside a transaction

    dependencies = [
        ("portal", "0012_interrupt_search_statistics"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="decision",
            options={
                "permissions": [
                    ("view_history", "Can browse decision history"),
                    ("export_history", "Can export decision history"),
                    ("view_metrics", "Can see decision metrics"),
                ]
            },
        ),
        migrations.AlterModelOptions(
            name="interrupt",
            options={
                "permissions": [
                    ("decide_interrupt", "Can decide interrupts"),
                    ("claim_interrupt", "Can claim and release interrupts"),
                    ("take_over_claim", "Can take over or release another reviewer's claim"),
                ]
            },
        ),
        migrations.AddField(
            model_name="run",
            name="author",
            field=models.ForeignKey(
                blank=True,
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="authored_runs",
                to=settings.AUTH_USER_MODEL,
            ),
        ),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddIndex(
                    model_name="run",
                    index=models.Index(
                        condition=models.Q(author__isnull=False),
                        fields=["author"],
                        name="run_author",
                    ),
                ),
            ],
            database_operations=[migrations.RunPython(_author_index(True), _author_index(False))],
        ),
        migrations.RunPython(grant_like_before, migrations.RunPython.noop, atomic=True),
    ]
