"""System checks. ``manage.py check --deploy --database default`` also asks PostgreSQL
whether the portal connects as a role that could unprotect the decision table."""

from __future__ import annotations

from typing import Any

from django.core.checks import CheckMessage, Tags, register
from django.core.checks import Warning as CheckWarning
from django.db import connections

_ROLE = (
    "SELECT r.rolsuper, pg_has_role(current_user, t.tableowner, 'USAGE')"
    " FROM pg_roles r, pg_tables t"
    " WHERE r.rolname = current_user AND t.tablename = 'portal_decision'"
    " AND t.schemaname = current_schema()"
)


@register(Tags.database, deploy=True)
def check_decision_table_role(
    app_configs: Any = None, databases: Any = None, **kwargs: Any
) -> list[CheckMessage]:
    found: list[CheckMessage] = []
    for alias in databases or ():
        connection = connections[alias]
        if connection.vendor != "postgresql":
            continue
        with connection.cursor() as cursor:
            cursor.execute(_ROLE)
            row = cursor.fetchone()
        if row is None:  # not migrated yet
            continue
        superuser, owns = row
        if superuser or owns:
            found.append(
                CheckWarning(
                    f"The portal connects to database {alias!r} as "
                    + ("a superuser" if superuser else "the owner of portal_decision")
                    + ", which can disable the decision table's triggers, and change, "
                    "delete or truncate decisions.",
                    hint="Run migrate as the owner, and connect the portal as a role of its "
                    "own given its rights by `manage.py grant_app_role` (README, Production).",
                    id="portal.W001",
                )
            )
    return found
