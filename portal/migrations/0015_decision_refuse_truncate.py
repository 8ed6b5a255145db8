"""Refuse TRUNCATE on ``portal_decision`` (PostgreSQL only; a no-op on SQLite).

0003's row-level trigger refuses UPDATE and DELETE, but TRUNCATE fires no row triggers:
one statement emptied the audit record. This statement-level trigger refuses it for every
role but superusers. A superuser could drop the trigger anyway; sparing them lets the test
runner and ``manage.py flush``, which connect as one, empty a database. The table's owner
can still disable triggers, which is why the app should not connect as the owner (see
``manage.py grant_app_role`` and the README's production section).
"""

from django.db import migrations

CREATE = """
CREATE OR REPLACE FUNCTION portal_decision_refuse_truncate() RETURNS trigger AS $$
BEGIN
    IF (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
        RETURN NULL;
    END IF;
    RAISE EXCEPTION 'portal_decision is append-only: TRUNCATE refused'
        USING ERRCODE = 'integrity_constraint_violation',
              HINT = 'Decisions are an audit record; they are never removed.';
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER portal_decision_no_truncate
    BEFORE TRUNCATE ON portal_decision
    FOR EACH STATEMENT EXECUTE FUNCTION portal_decision_refuse_truncate();
"""
DROP = """
DROP TRIGGER IF EXISTS portal_decision_no_truncate ON portal_decision;
DROP FUNCTION IF EXISTS portal_decision_refuse_truncate();
"""


def _run(sql: str):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(sql, params=None)

    return run


class Migration(migrations.Migration):
    dependencies = [
        ("portal", "0014_api_token_scopes_expiry_revocation"),
    ]

    operations = [migrations.RunPython(_run(CREATE), _run(DROP))]
