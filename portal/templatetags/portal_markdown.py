"""``{{ text|markdown }}``: Markdown that agents write (a request's description), as safe
HTML.

The text is untrusted, so raw HTML is off (it shows as text), images show as their alt
text (they would load from anywhere), and links keep markdown-it's check, which refuses
``javascript:``, ``vbscript:``, ``file:`` and ``data:`` targets; the links that remain
open with no referrer and no access to this page.
"""

from __future__ import annotations

import html
from typing import Any

from django import template
from django.utils.html import escape, strip_tags
from django.utils.safestring import SafeString, mark_safe
from markdown_it import MarkdownIt

register = template.Library()

_md = MarkdownIt("commonmark", {"html": False})


def _link_open(self: Any, tokens: Any, idx: int, options: Any, env: Any) -> str:
    tokens[idx].attrSet("rel", "nofollow noopener noreferrer")
    return str(self.renderToken(tokens, idx, options, env))


def _image(self: Any, tokens: Any, idx: int, options: Any, env: Any) -> str:
    # Its alt text, as text: an image would load from wherever the author points it.
    return escape(tokens[idx].content)


_md.add_render_rule("link_open", _link_open)
_md.add_render_rule("image", _image)


def render_markdown(text: str) -> SafeString:
    """``text`` as HTML in which nothing the author wrote can run or load."""
    html: str = _md.render(text)
    # Raw HTML is off and links are checked: nothing the author wrote can run.
    return mark_safe(html)  # noqa: S308


@register.filter(name="markdown")
def markdown_filter(text: Any) -> SafeString:
    return render_markdown(str(text)) if text else mark_safe("")


@register.filter(name="plaintext")
def plaintext_filter(text: Any) -> str:
    """Markdown as the words a reader sees, on one line: for places too small for
    formatting (a queue row), where ``**$120**`` should read as ``$120``."""
    if not text:
        return ""
    return " ".join(html.unescape(strip_tags(_md.render(str(text)))).split())
