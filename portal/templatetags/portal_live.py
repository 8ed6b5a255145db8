"""Template helpers for the live pages (queue, chat, threads)."""

from __future__ import annotations

import json
from typing import Any

from django import template
from django.urls import NoReverseMatch, reverse
from django.utils import dateformat, timezone
from django.utils.html import format_html
from django.utils.safestring import mark_safe

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
def when(value: Any) -> str:
    """A time shown both ways: relative (kept fresh by portal.js) and absolute.

    Built in Python rather than from a template: it is in every queue row, which the
    worker renders for the watchers on each pause, and a sub-template cost most of that
    render."""
    if not value:
        return mark_safe('<span class="muted">—</span>')
    local = timezone.localtime(value)
    full = dateformat.format(local, "Y-m-d H:i:s T")
    return format_html(
        '<time datetime="{}" data-relative title="{}">{}</time> <span class="abs-time">{}</span>',
        dateformat.format(local, "c"),
        full,
        dateformat.format(local, "Y-m-d H:i"),
        full,
    )


@register.filter
def pretty_json(value: Any) -> str:
    """Indented JSON for display (autoescaped by the template like any string)."""
    try:
        return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(value)
