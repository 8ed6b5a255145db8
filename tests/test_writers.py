"""The doors never write rows: pages, the API, the admin and template tags call the rooms
below them, which own their tables (CONTRIBUTING, "Rules of the house").

Read from the source with ``ast``, so every branch counts. A write is a model's
``save()`` or ``delete()``, or a queryset's ``create``, ``update``, ``delete`` and their
kin, reached through a manager (``X.objects...``) or a queryset method (``.filter(...)``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOORS = ["portal/web", "portal/api", "portal/admin", "portal/templatetags"]
WRITES = {
    "save",
    "delete",
    "create",
    "update",
    "bulk_create",
    "bulk_update",
    "get_or_create",
    "update_or_create",
}
QUERYSET = {"objects", "filter", "exclude", "all", "select_for_update", "select_related"}


def _reaches_a_queryset(node: ast.expr) -> bool:
    """True when ``node`` is ``X.objects`` or a chain of queryset methods on one."""
    while True:
        if isinstance(node, ast.Attribute):
            if node.attr in QUERYSET:
                return True
            node = node.value
        elif isinstance(node, ast.Call):
            node = node.func
        else:
            return False


def writes_in(source: str) -> list[int]:
    """The lines of ``source`` that write a row."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        name, receiver = node.func.attr, node.func.value
        if name in ("save", "delete") or (name in WRITES and _reaches_a_queryset(receiver)):
            found.append(node.lineno)
    return found


def test_no_door_writes_a_row_itself() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line}"
        for door in DOORS
        for path in sorted((ROOT / door).rglob("*.py"))
        for line in writes_in(path.read_text())
    ]
    assert found == [], "doors write rows; call the room that owns the table:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("source", "lines"),
    [
        ("ApiToken.objects.filter(pk=1).update(last_used_at=now)", [1]),
        ("Thread.objects.create(owner=user)", [1]),
        ("token.save()", [1]),
        ("row.delete()", [1]),
        ("Run.objects.select_for_update().filter(pk=1).delete()", [1]),
        ("context.update({'a': 1})", []),
        ("out.update(dict.fromkeys(ids, entry))", []),
        ("Thread.objects.filter(pk=1).first()", []),
    ],
)
def test_writes_are_read_in_every_form(source: str, lines: list[int]) -> None:
    assert writes_in(source) == lines
