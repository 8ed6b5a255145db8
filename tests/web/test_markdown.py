"""A request's description is Markdown from an agent: rendered, and nothing in it runs."""

from __future__ import annotations

import pytest
from django.urls import reverse

from portal.templatetags.portal_markdown import render_markdown
from tests.factories import make_interrupt


def test_markdown_renders_emphasis_lists_code_and_plain_links():
    html = render_markdown(
        "Refund **$42.50**?\n\n- order `A-1001`\n- [policy](https://example.test/p)"
    )

    assert "<strong>$42.50</strong>" in html
    assert "<li>order <code>A-1001</code></li>" in html
    assert '<a href="https://example.test/p" rel="nofollow noopener noreferrer">policy</a>' in html


@pytest.mark.parametrize(
    "text",
    [
        "<script>alert(1)</script>",
        "<img src=x onerror=alert(1)>",
        '<a href="javascript:alert(1)">x</a>',
        "[x](javascript:alert(1))",
        "[x](JaVaScRiPt:alert(1))",
        "[x](vbscript:msgbox(1))",
        "[x](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)",
        "<javascript:alert(1)>",
        "![tracker](https://evil.test/pixel.png)",
        '<div style="position:fixed">x</div>',
    ],
)
def test_raw_html_script_links_and_images_are_neutralised(text):
    html = render_markdown(text)

    assert "<script" not in html and "<img" not in html and "<div" not in html
    assert "<a " not in html  # not one of these targets becomes a link
    # Raw HTML shows as text, escaped.
    if text.startswith("<") and not text.startswith("<javascript"):
        assert "&lt;" in html


@pytest.mark.django_db
def test_the_decision_page_renders_the_description_as_safe_markdown(client, reviewer):
    interrupt = make_interrupt(
        message="Refund **$42.50**? See [notes](javascript:alert(1)) <script>alert(1)</script>"
    )
    client.force_login(reviewer)

    html = client.get(reverse("interrupt_detail", args=[interrupt.pk])).content.decode()

    assert "Refund <strong>$42.50</strong>?" in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert 'href="javascript:' not in html


def test_the_queue_row_shows_the_description_as_plain_words_not_markdown_marks(client, reviewer):
    interrupt = make_interrupt(
        message="Refund **$42.50** to `order 7`?\n\n- see [notes](https://example.test) <b>x</b>"
    )
    client.force_login(reviewer)

    html = client.get(reverse("queue")).content.decode()
    row = html[html.index(f'id="q-{interrupt.pk}"') :]
    row = row[: row.index("</tr>")]

    assert "Refund $42.50 to order 7? see notes &lt;b&gt;x&lt;/b&gt;" in row
    assert "**" not in row and "`" not in row and "<b>" not in row
