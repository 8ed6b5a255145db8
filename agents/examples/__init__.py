"""Shipped example agents. Each runs offline on a scripted model: ``python -m
agents.examples.<name>``.

Every module has ``build_agent(model=None) -> ReactAgent`` (the scripted model when
``model`` is None) and ``async def main()``; ``refunds``, ``transfers`` and ``contact`` pause
from their tools, ``accounts`` is meant to be compiled with ``interrupt_before=["TOOL"]``
(see its ``COMPILE_OPTIONS``). Submodules are not imported here, so ``python -m`` runs them
cleanly; use ``load(name)``.
"""

from __future__ import annotations

import importlib
import re
from types import ModuleType
from typing import Any

NAMES = ("refunds", "transfers", "accounts", "contact")

# The decision every approval in these examples asks for.
DECISION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"approved": {"type": "boolean"}, "note": {"type": "string"}},
    "required": ["approved"],
}

_DOLLARS = re.compile(r"\$\s?(\d[\d,]*(?:\.\d+)?)")


def load(name: str) -> ModuleType:
    """The example module called ``name`` (one of ``NAMES``)."""
    if name not in NAMES:
        raise ValueError(f"no example agent {name!r}; choose one of {', '.join(NAMES)}")
    return importlib.import_module(f"agents.examples.{name}")


def dollars(text: str) -> float | None:
    """The first dollar amount in ``text`` ("$5,000" -> 5000.0), or None."""
    match = _DOLLARS.search(text)
    return float(match[1].replace(",", "")) if match else None
