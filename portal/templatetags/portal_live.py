"""Template helpers for the live pages (queue, chat, threads)."""

from __future__ import annotations

import json
from typing import Any

from django import template
from django.urls import NoReverseMatch, reverse
from django.utils import timezone

register = template.Library()


@register.simple_tag
def url_or_none(name: str, *args: Any) -> str | None:
    """``reverse(name, args)``, or None when that page is not installed in this build (the
    decisions and history areas are separate modules)."""
    try:
        return reverse(name, args=args)
    except NoReverseMatch:
        return None


@register.inclusion_tag("portal/partials/chunk_time.html")
def when(value: Any) -> dict[str, Any]:
    """A time shown both ways: relative (kept fresh by portal.js) and absolute."""
    return {"value": value, "local": timezone.localtime(value) if value else None}


@register.filter
def pretty_json(value: Any) -> str:
    """Indented JSON for display (autoescaped by the template like any string)."""
    try:
        return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(value)
