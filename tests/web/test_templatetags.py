"""The live pages' template helpers."""

from __future__ import annotations

from datetime import UTC, datetime

from django.template import Context, Template

from portal.templatetags.portal_live import when


def test_when_shows_a_time_relative_and_absolute():
    html = when(datetime(2026, 11, 30, 1, 7, 9, tzinfo=UTC))
    assert html == (
        '<time datetime="2026-11-30T01:07:09+00:00" data-relative title="2026-11-30 01:07:09 UTC">'
        '2026-11-30 01:07</time> <span class="abs-time">2026-11-30 01:07:09 UTC</span>'
    )


def test_when_shows_a_dash_for_no_time_and_is_safe_in_a_template():
    assert when(None) == '<span class="muted">—</span>'
    rendered = Template("{% load portal_live %}{% when t %}").render(Context({"t": None}))
    assert rendered == '<span class="muted">—</span>'  # not escaped


def test_no_template_has_a_comment_django_would_print():
    # ``{# ... #}`` ends on its own line; one spread over several lines is printed as text
    # (the decision page once showed its own comment to every reviewer).
    from pathlib import Path

    from django.conf import settings

    printed = [
        f"{path.relative_to(root)}:{number}"
        for root in map(Path, settings.TEMPLATES[0]["DIRS"])
        for path in sorted(root.rglob("*.html"))
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if line.count("{#") > line.count("#}")
    ]
    assert printed == []


def test_no_sentence_goes_on_after_a_time_on_a_line_of_its_own():
    # ``when`` ends with the absolute time as a block: a "." written after it lands alone
    # on the next line.
    import re
    from pathlib import Path

    from django.conf import settings

    stranded = [
        f"{path.relative_to(root)}: {found[0]}"
        for root in map(Path, settings.TEMPLATES[0]["DIRS"])
        for path in sorted(root.rglob("*.html"))
        for found in re.finditer(r"{% when [^%]*%}[.,;:]", path.read_text())
    ]
    assert stranded == []
