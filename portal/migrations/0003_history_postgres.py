"""PostgreSQL-only parts of the decision history (issue 7); a no-op on SQLite.

- A trigger that refuses UPDATE and DELETE on ``portal_decision``: decisions are an audit
  record, and the ORM refusing is not enough when someone has a SQL prompt. (TRUNCATE is
  left alone: the test runner empties tables with it between transactional tests.)
- A GIN expression index for full-text search over an interrupt's message and payload.
  Its expression must stay equal to ``portal.history._FullText``, or the planner will not
  use it.
- A GIN index on the payload for the tool-name filter (jsonb containment).
"""

from django.db import migrations


class PostgresOnlySQL(migrations.RunSQL):
    """RunSQL that does nothing on other databases (the demo runs on SQLite)."""

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            super().database_forwards(app_label, schema_editor, from_state, to_state)

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            super().database_backwards(app_label, schema_editor, from_state, to_state)


REFUSE_CHANGES = """
CREATE OR REPLACE FUNCTION portal_decision_refuse_change() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'portal_decision is append-only: % of decision % refused', TG_OP, OLD.id
        USING ERRCODE = 'integrity_constraint_violation',
              HINT = 'Decisions are an audit record; record a new decision instead.';
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER portal_decision_append_only
    BEFORE UPDATE OR DELETE ON portal_decision
    FOR EACH ROW EXECUTE FUNCTION portal_decision_refuse_change();
"""

ALLOW_CHANGES = """
DROP TRIGGER IF EXISTS portal_decision_append_only ON portal_decision;
DROP FUNCTION IF EXISTS portal_decision_refuse_change();
"""

SEARCH_INDEX = """
CREATE INDEX portal_interrupt_fulltext ON portal_interrupt USING gin (
    to_tsvector('simple'::regconfig,
        COALESCE("message", '') || ' ' || COALESCE(("value")::text, ''))
);
CREATE INDEX portal_interrupt_value_path ON portal_interrupt USING gin ("value" jsonb_path_ops);
"""

DROP_SEARCH_INDEX = """
DROP INDEX IF EXISTS portal_interrupt_fulltext;
DROP INDEX IF EXISTS portal_interrupt_value_path;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("portal", "0002_decision_audit_chain"),
    ]

    operations = [
        PostgresOnlySQL(REFUSE_CHANGES, ALLOW_CHANGES),
        PostgresOnlySQL(SEARCH_INDEX, DROP_SEARCH_INDEX),
    ]
