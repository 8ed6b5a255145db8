"""A request is closed in one place: ``portal.reviews.resolve.resolve`` records every
``Decision``. A second closing path (a new door, a copy of the sequence) fails here."""

import ast
from pathlib import Path

import portal

PORTAL = Path(portal.__file__).parent
# The ways a row can be written through the model or its manager.
WRITES = {"create", "bulk_create", "get_or_create", "update_or_create"}


def _decision_writes(source: str) -> list[int]:
    """Lines of ``source`` that construct a Decision or write one through its manager."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id == "Decision":
            found.append(node.lineno)
        elif (
            isinstance(func, ast.Attribute)
            and func.attr in WRITES
            and isinstance(func.value, ast.Attribute)
            and isinstance(func.value.value, ast.Name)
            and func.value.value.id == "Decision"
        ):
            found.append(node.lineno)
    return sorted(found)


def test_the_check_finds_each_way_of_writing_a_decision():
    source = (
        "Decision.objects.create(interrupt=i)\n"
        "Decision(interrupt=i).save()\n"
        "Decision._default_manager.bulk_create([])\n"
        "Decision.objects.filter(pk=1).first()\n"
    )

    assert _decision_writes(source) == [1, 2, 3]


def test_decisions_are_recorded_in_exactly_one_place_in_portal():
    places = [
        f"{path.relative_to(PORTAL.parent)}:{line}"
        for path in sorted(PORTAL.rglob("*.py"))
        if "migrations" not in path.parts
        for line in _decision_writes(path.read_text())
    ]

    assert len(places) == 1, f"Decision rows are written in {places}; close requests with resolve()"
    assert places[0].startswith("portal/reviews/resolve.py:")
