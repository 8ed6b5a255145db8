"""Comments say why; benchmark figures and issue numbers go stale there. They belong in
docs/benchmarks.md and in commit messages, so no comment or docstring carries one."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ISSUE = re.compile(r"\bissues? ?#?\d+|\(#\d+\)|#\d+'s", re.IGNORECASE)
FIGURE = re.compile(
    r"\d(\.\d+)? ?(ms|µs|us)\b"  # a time
    r"|\d(\.\d+)? ?x (faster|slower)|\d(\.\d+)? ?%"  # a ratio
    r"|\bp(50|95|99) (of|was|is) \d",  # a percentile
    re.IGNORECASE,
)
# Where comments may carry neither; bench/ code may name figures it computes, not issues.
CHECKED = {
    "portal": (ISSUE, FIGURE),
    "agents": (ISSUE, FIGURE),
    "templates": (ISSUE, FIGURE),
    "static": (ISSUE, FIGURE),
    "bench": (ISSUE,),
}
OTHER_COMMENTS = re.compile(
    r"/\*.*?\*/|<!--.*?-->|\{#.*?#\}|\{% comment %\}.*?\{% endcomment %\}|(?<![:\"'\\])//[^\n]*",
    re.DOTALL,
)


def comments(path: Path) -> Iterator[tuple[int, str]]:
    """(line, text) of every comment and docstring in ``path``."""
    source = path.read_text(errors="replace")
    if path.suffix == ".py":
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.COMMENT:
                yield token.start[0], token.string
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                doc = ast.get_docstring(node, clean=False)
                if doc:
                    yield node.body[0].lineno, doc
        return
    for match in OTHER_COMMENTS.finditer(source):
        yield source.count("\n", 0, match.start()) + 1, match.group(0)


def _files(folder: str) -> list[Path]:
    return [
        path
        for path in sorted((ROOT / folder).rglob("*"))
        if path.suffix in {".py", ".html", ".js", ".css"}
        and not {"vendor", "migrations"} & set(path.parts)
    ]


@pytest.mark.parametrize("folder", sorted(CHECKED))
def test_no_comment_carries_an_issue_number_or_a_benchmark_figure(folder):
    found = [
        f"{path.relative_to(ROOT)}:{line}: {pattern.search(text).group(0)!r}"  # type: ignore[union-attr]
        for path in _files(folder)
        for line, text in comments(path)
        for pattern in CHECKED[folder]
        if pattern.search(text)
    ]
    assert found == [], "move these to docs/benchmarks.md or a commit message:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("text", "caught"),
    [
        ("# live portal (issue 6): Redis pub/sub", True),
        ("# about 7 ms on the benchmark machine", True),
        ("# 3.3x faster than the peer", True),
        ("# cuts CPU by 20 %", True),
        ("# wait for ms, as a network failure would", False),
        ("# ``issue_refund`` asks before it pays", False),
    ],
)
def test_the_sweep_tells_a_figure_from_a_word(text, caught):
    assert bool(ISSUE.search(text) or FIGURE.search(text)) is caught
