"""Template helpers for the live pages (queue, chat, threads)."""

from __future__ import annotations

import html
import json
from datetime import datetime
from typing import Any

from django import template
from django.urls import NoReverseMatch, reverse
from django.utils import dateformat, timezone
from django.utils.safestring import SafeString, mark_safe

from portal.accounts import roles

register = template.Library()


@register.simple_tag
def url_or_none(name: str, *args: Any) -> str | None:
    """``reverse(name, args)``, or None when that page is not installed in this build (the
    decisions and history areas are separate modules)."""
    try:
        return reverse(name, args=args)
    except NoReverseMatch:
        return None


@register.simple_tag
def when(value: Any) -> SafeString:
    """A time shown both ways: relative (kept fresh by portal.js) and absolute."""
    return _when_local(timezone.localtime(value) if value else None)


def _when_local(local: datetime | None) -> SafeString:
    if local is None:
        return mark_safe('<span class="muted">—</span>')
    # dateformat.format(local, "c"), (..., "Y-m-d H:i") and (..., "Y-m-d H:i:s T"), without
    # parsing three format strings on each call (that was most of this tag's cost).
    t = dateformat.DateFormat(local)
    minute = f"{t.Y()}-{t.m()}-{t.d()} {t.H()}:{t.i()}"
    return _html(
        '<time datetime="{iso}" data-relative title="{full}">{minute}</time>'
        ' <span class="abs-time">{full}</span>',
        iso=t.c(),
        full=f"{minute}:{t.s()} {t.T()}",
        minute=minute,
    )


@register.filter
def pretty_json(value: Any) -> str:
    """Indented JSON for display (autoescaped by the template like any string)."""
    try:
        return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(value)


@register.filter
def css_string(value: Any) -> str:
    """``value`` as a quoted CSS string, for a selector built in a template (the template
    escapes it again for the HTML attribute it sits in). Commas and angle brackets are
    escaped too: htmx splits a swap's selector at them, even inside quotes."""
    out = []
    for ch in str(value):
        code = ord(ch)
        out.append(f"\\{code:x} " if ch in '"\\,<>/' or code < 0x20 or code == 0x7F else ch)
    return '"' + "".join(out) + '"'


def _html(template: str, /, **values: Any) -> SafeString:
    """``format_html(template, **values)`` without its checks for lazy strings, which
    cost a third of a queue row (no value here is lazy): HTML (anything with ``__html__``)
    goes in as it is, and every other value escaped as ``django.utils.html.escape``
    escapes it."""
    return SafeString(
        template.format_map(
            {
                key: value.__html__() if hasattr(value, "__html__") else html.escape(str(value))
                for key, value in values.items()
            }
        )
    )


@register.filter
def may_retry(user: Any, thread: Any) -> bool:
    """``{% if user|may_retry:thread %}``: whether to offer the retry button."""
    return roles.may_retry(user, thread)


@register.filter
def may_cancel(user: Any, thread: Any) -> bool:
    """``{% if user|may_cancel:thread %}``: whether to offer cancelling the thread."""
    return roles.may_cancel(user, thread)
