"""What the index migrations share (a module the migration loader skips: its name starts
with "_"). Keep it stable: migrations that ran already call it."""

from __future__ import annotations

from typing import Any


def swap_index(
    schema_editor: Any, *, table: str, name: str, spec: str, replaces: str | None = None
) -> None:
    """Build index ``name`` as ``CREATE INDEX name ON table spec`` and take the place of
    ``replaces`` (default: the index of that name). On PostgreSQL the new index is built
    CONCURRENTLY under a temporary name, so the table keeps taking writes meanwhile (the
    migration must not be atomic); a build a failed run left invalid is dropped first.
    SQLite (the demo's small tables) drops and creates."""
    execute = schema_editor.execute
    old = replaces or name
    if schema_editor.connection.vendor != "postgresql":
        execute(f"DROP INDEX IF EXISTS {old}")
        execute(f"CREATE INDEX {name} ON {table} {spec}")
        return
    new = f"{name}_new"
    execute(f"DROP INDEX CONCURRENTLY IF EXISTS {new}")
    execute(f"CREATE INDEX CONCURRENTLY {new} ON {table} {spec}")
    execute(f"DROP INDEX CONCURRENTLY IF EXISTS {old}")
    if replaces is not None:
        execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
    execute(f"ALTER INDEX {new} RENAME TO {name}")
