"""System checks. ``manage.py check --deploy --database default`` also asks PostgreSQL
whether the portal connects as a role that could unprotect the decision table."""

from __future__ import annotations

from typing import Any

from django.core.checks import CheckMessage, Tags, register
from django.core.checks import Error as CheckError
from django.core.checks import Warning as CheckWarning
from django.db import connections

_ROLE = (
    "SELECT r.rolsuper, pg_has_role(current_user, t.tableowner, 'USAGE')"
    " FROM pg_roles r, pg_tables t"
    " WHERE r.rolname = current_user AND t.tablename = 'portal_decision'"
    " AND t.schemaname = current_schema()"
)


@register()
def check_policies(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Every PORTAL_POLICIES entry reads: a bad count or expiry is found at start-up, not
    when a reviewer first answers a request it covers."""
    from django.conf import settings

    from portal.models.policies import policy_for

    found: list[CheckMessage] = []
    for key in getattr(settings, "PORTAL_POLICIES", {}) or {}:
        agent, _, reason = str(key).partition(":")
        try:
            policy_for(agent, reason)  # the key itself is the first one tried
        except ValueError as exc:
            found.append(
                CheckError(
                    str(exc),
                    hint="Fix the entry in PORTAL_POLICIES (portal/settings.py) or "
                    "PORTAL_POLICIES_EXTRA.",
                    id="portal.E001",
                )
            )
    return found


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
                    "own given its rights by `manage.py grant_app_role` "
                    "(docs/deployment.md, Production).",
                    id="portal.W001",
                )
            )
    return found
