"""``manage.py grant_app_role ROLE``: give the portal's runtime role exactly what it needs.

More in docs/architecture.md (`management/commands/grant_app_role.py`)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connections, transaction

APPEND_ONLY = {
    "portal_decision": "SELECT, INSERT",
    "portal_approval": "SELECT, INSERT",
    "portal_auditevent": "SELECT, INSERT",
}
READ_ONLY = {"django_migrations": "SELECT"}
READ_WRITE = "SELECT, INSERT, UPDATE, DELETE"


def grant_statements(connection: Any, role: str) -> list[str]:
    """The statements that leave ``role`` with the portal's runtime rights and no more."""
    quote = connection.ops.quote_name
    tables = sorted(
        set(connection.introspection.django_table_names(only_existing=True)) | set(READ_ONLY)
    )
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_schema()")
        schema = quote(cursor.fetchone()[0])
    who = quote(role)
    statements = [f"GRANT USAGE ON SCHEMA {schema} TO {who}"]
    for table in tables:
        rights = APPEND_ONLY.get(table) or READ_ONLY.get(table) or READ_WRITE
        statements.append(f"REVOKE ALL ON TABLE {quote(table)} FROM {who}")
        statements.append(f"GRANT {rights} ON TABLE {quote(table)} TO {who}")
    statements.append(f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA {schema} TO {who}")
    return statements


def _refuse_unsafe_role(connection: Any, role: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT r.rolsuper, pg_has_role(r.rolname, t.tableowner, 'USAGE')"
            " FROM pg_roles r, pg_tables t"
            " WHERE r.rolname = %s AND t.tablename = 'portal_decision'"
            " AND t.schemaname = current_schema()",
            [role],
        )
        row = cursor.fetchone()
    if row is None:
        raise CommandError(
            f"no role {role!r}, or no portal_decision table: create the role "
            f"(CREATE ROLE {role} LOGIN PASSWORD '...') and run migrate first"
        )
    superuser, owns = row
    if superuser:
        raise CommandError(f"role {role!r} is a superuser: no grant can restrict it")
    if owns:
        raise CommandError(
            f"role {role!r} owns portal_decision (or is a member of its owner), so it could "
            "disable the table's triggers: connect the portal as a role of its own"
        )


class Command(BaseCommand):
    help = (
        "Grant the portal's runtime role what the app needs and no more (decisions: "
        "SELECT and INSERT only). Run as the tables' owner after every migrate."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("role", help="The role the web processes and workers log in as.")
        parser.add_argument("--database", default="default", help="Database alias.")
        parser.add_argument(
            "--sql", action="store_true", help="Print the statements instead of running them."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        connection = connections[options["database"]]
        if connection.vendor != "postgresql":
            raise CommandError("grant_app_role is for PostgreSQL; SQLite has no roles")
        role = options["role"]
        statements = grant_statements(connection, role)
        if options["sql"]:
            self.stdout.write(";\n".join(statements) + ";")
            return
        _refuse_unsafe_role(connection, role)
        # All or nothing: a role left half-granted would fail later, at some request.
        with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
            for statement in statements:
                cursor.execute(statement)
        others = (len(statements) - 2) // 2 - len(APPEND_ONLY) - len(READ_ONLY)
        self.stdout.write(
            f"granted {role}: SELECT, INSERT on portal_decision, portal_approval and "
            "portal_auditevent; SELECT on django_migrations; "
            f"read-write on the {others} other tables; no TRUNCATE, TRIGGER or ownership"
        )
