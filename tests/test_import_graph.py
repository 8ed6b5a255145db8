"""``portal/`` has no import cycles, counting imports inside functions too.

A local import hides a cycle from Python but not from a reader: each module should make
sense from the modules below it. The graph is read from the source with ``ast``, so nothing
is imported and every branch counts (``TYPE_CHECKING`` blocks included).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "portal"


def _modules() -> dict[str, bool]:
    """Every module of the package, and whether it is a package (an ``__init__``)."""
    found = {}
    for path in sorted((ROOT / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        found[".".join(parts)] = is_package
    return found


def _resolve(name: str, known: dict[str, bool]) -> str | None:
    """The module ``name`` is, or the nearest package or module it is an attribute of."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(module: str, source: str, known: dict[str, bool]) -> set[str]:
    """Every portal module that ``source`` (the text of ``module``) imports, anywhere."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")
                keep = len(anchor) - node.level + (1 if known.get(module) else 0)
                base = ".".join([*anchor[:keep], base] if base else anchor[:keep])
            # ``from portal import roles`` imports the module portal.roles; ``from
            # portal.models import Thread`` resolves to portal.models.
            targets = [f"{base}.{alias.name}" for alias in node.names]
        for target in targets:
            if target.split(".")[0] != PACKAGE:
                continue
            resolved = _resolve(target, known)
            if resolved is not None and resolved != module:
                found.add(resolved)
    return found


def import_graph() -> dict[str, set[str]]:
    known = _modules()
    graph = {}
    for name, is_package in known.items():
        path = ROOT / Path(*name.split("."))
        path = path / "__init__.py" if is_package else path.with_suffix(".py")
        graph[name] = imports_of(name, path.read_text(), known)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle, as a path that ends where it starts; None when there is none."""
    finished: set[str] = set()
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt in path:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in finished:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        path.pop()
        finished.add(node)
        return None

    for node in sorted(graph):
        if node not in finished:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def test_the_portal_package_has_no_import_cycles() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle in portal/: " + " -> ".join(cycle or [])


def test_a_cycle_closed_by_an_import_inside_a_function_is_found() -> None:
    known = {"portal": True, "portal.a": False, "portal.b": False}
    graph = {
        "portal.a": imports_of("portal.a", "from portal import b\n", known),
        "portal.b": imports_of("portal.b", "def f():\n    from portal.a import x\n", known),
    }
    assert find_cycle(graph) == ["portal.a", "portal.b", "portal.a"]


@pytest.mark.parametrize(
    ("module", "source", "expected"),
    [
        ("portal.probe", "from portal.accounts import roles", {"portal.accounts.roles"}),
        ("portal.probe", "from portal.models import Thread", {"portal.models"}),
        ("portal.probe", "def f():\n    import portal.runs.worker", {"portal.runs.worker"}),
        ("portal.probe", "if TYPE_CHECKING:\n    from portal import audit", {"portal.audit"}),
        ("portal.accounts.probe", "from . import access", {"portal.accounts.access"}),
        ("portal.web.probe", "from .threads import x", {"portal.web.threads"}),
        ("portal.web", "from .threads import x", {"portal.web.threads"}),
        ("portal.probe", "from portal.web import base", {"portal.web.base"}),
        ("portal.probe", "import agents.graph\nfrom django import forms", set()),
    ],
)
def test_imports_are_read_in_every_form(module: str, source: str, expected: set[str]) -> None:
    assert imports_of(module, source, _modules()) == expected


def test_the_decision_path_in_contributing_names_files_that_exist_once_each() -> None:
    text = (ROOT / "CONTRIBUTING.md").read_text()
    section = text.split("## The decision path", 1)[1].split("\n## ", 1)[0]
    steps = re.findall(r"^\d+\. `([^`]+)`", section, flags=re.MULTILINE)
    assert steps, "CONTRIBUTING.md has no numbered decision path"
    missing = [step for step in steps if not (ROOT / step).is_file()]
    assert missing == [], f"the decision path names files that do not exist: {missing}"
    assert len(set(steps)) == len(steps) <= 8
