"""The production section of docs/deployment.md (moved there from the README), read as the
commands it tells an operator to run, so the tests that follow it cannot drift from it."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "docs" / "deployment.md"


@dataclass(frozen=True)
class ProductionSteps:
    sql: list[str]  # step 2, as a PostgreSQL superuser
    env: dict[str, str]  # step 3
    try_locally: dict[str, str]  # step 3, without a TLS proxy in front
    setup: list[str]  # step 4
    start: list[str]  # step 5


def _exports(block: str) -> dict[str, str]:
    env: dict[str, str] = {}
    for line in block.splitlines():
        words = shlex.split(line)
        assert words[0] == "export", f"not an export line in docs/deployment.md: {line!r}"
        for word in words[1:]:
            name, _, value = word.partition("=")
            env[name] = value
    return env


def production_steps() -> ProductionSteps:
    text = README.read_text()
    section = text[text.index("\n## Production\n") :]
    section = section[: section.index("\n## ", 1)]
    # A command may go on over several lines, as a shell reads a backslash at the end.
    blocks = re.findall(r"```(\w+)\n(.*?)```", section.replace("\\\n", " "), re.S)
    sql = [body for lang, body in blocks if lang == "sql"]
    sh = [body for lang, body in blocks if lang == "sh"]
    assert len(sql) == 1 and len(sh) == 4, "deployment.md's production section changed shape"
    env, local, setup, start = sh
    return ProductionSteps(
        sql=[s.strip() for s in sql[0].split(";") if s.strip()],
        env=_exports(env),
        try_locally=_exports(local),
        setup=setup.strip().splitlines(),
        start=start.strip().splitlines(),
    )
