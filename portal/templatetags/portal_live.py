"""Template helpers for the live pages (queue, chat, threads).

``when`` and ``queue_row`` are written in Python rather than as templates: the worker
renders a queue row, with its time, on its event loop on each pause (the watchers get it
over the websocket), and a template render was most of a pause's cost."""

from __future__ import annotations

import functools
import html
import json
import re
import unicodedata
from datetime import datetime
from typing import Any

from django import template
from django.conf import settings
from django.urls import NoReverseMatch, get_script_prefix, get_urlconf, reverse
from django.utils import dateformat, timezone
from django.utils.safestring import SafeString, mark_safe
from django.utils.text import Truncator

from portal.words import reason_words

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


# --- the review queue's row -------------------------------------------------------------
QUEUE_MESSAGE_CHARS = 160

_QUEUE_ROW = """\
<tr id="q-{pk}" class="queue-row" data-interrupt="{pk}" data-created="{created}" \
data-agent="{agent}" data-reason="{reason}">
  <td><span class="tag">{agent_or_dash}</span></td>
  <td><span class="{reason_class}">{reason_text}</span></td>
  <td class="queue-message">
    {message}
    {title_line}
    {asker_line}
  </td>
  <td class="queue-age">{age}</td>
  <td class="queue-claim">{claimant}</td>
  <td class="queue-actions">
    {review}
    {claim_button}
  </td>
</tr>"""


@register.simple_tag
def queue_row(item: Any) -> SafeString:
    """The review queue's row for ``item``, a pending ``Interrupt`` whose ``thread`` and
    ``claimed_by`` are at hand: it queries nothing, so an event loop may call it.

    The queue page and the worker's broadcasts (``broadcast.render_queue_item``) both
    use it. Links to pages this build does not install are left out (``url_or_none``)."""
    open_url, claim_url, unclaim_url = interrupt_urls(
        item.pk, "interrupt_detail", "interrupt_claim", "interrupt_unclaim"
    )
    created = timezone.localtime(item.created_at) if item.created_at else None
    title = item.thread.title
    title_line = _html('<div class="muted small">“{title}”</div>', title=title) if title else ""
    asker_line = _queue_asker(item)
    review = ""
    if open_url:
        review = _html('<a class="button primary" href="{url}">Review</a>', url=open_url)
    return _html(
        _QUEUE_ROW,
        pk=item.pk,
        created=created.isoformat() if created else "",
        agent=item.agent,
        agent_or_dash=item.agent or "—",
        reason=item.reason,
        reason_text=reason_words(item.reason),
        reason_class="tag warn" if item.reason == "tool_approval" else "tag",
        message=_queue_message(item.message, open_url),
        title_line=title_line,
        asker_line=asker_line,
        age=_when_local(created),
        claimant=_queue_claimant(item.claimed_by),
        review=review,
        claim_button=_claim_button(item.claimed_by, claim_url, unclaim_url),
    )


def _queue_message(message: str, open_url: str | None) -> SafeString:
    text = truncate_chars(message or "(no message)", QUEUE_MESSAGE_CHARS)
    if open_url:
        return _html('<a href="{url}">{text}</a>', url=open_url, text=text)
    return _html("{text}", text=text)


def _queue_asker(item: Any) -> SafeString | str:
    # Who asked, and a link to their thread: two requests alike in every other way (the
    # same refund asked twice) are told apart by these. A row the worker renders from what
    # a step wrote may not know the owner; it still links the thread.
    owner = getattr(item.thread, "owner", None)
    thread_id = getattr(item, "thread_id", None)
    thread_url = url_or_none("thread_detail", str(thread_id)) if thread_id else None
    if owner is None and thread_url is None:
        return ""
    asker = (
        _html('asked by <strong class="queue-asker">{name}</strong>', name=owner.get_username())
        if owner is not None
        else ""
    )
    link = (
        _html('<a href="{url}" class="queue-thread">the conversation</a>', url=thread_url)
        if thread_url
        else ""
    )
    joiner = " · " if asker and link else ""
    return _html(
        '<div class="small">{asker}{joiner}{link}</div>', asker=asker, joiner=joiner, link=link
    )


def truncate_chars(text: str, length: int) -> str:
    """``Truncator(text).chars(length)``, as the ``truncatechars`` filter does it.

    That normalises the text (NFC) and counts its characters one by one, which cost more
    than a queue row's markup. It returns text that is normalised already and no longer
    than ``length`` unchanged, so such text is returned as is."""
    if len(text) <= length and unicodedata.is_normalized("NFC", text):
        return text
    return Truncator(text).chars(length)


def _queue_claimant(claimant: Any) -> SafeString:
    if claimant is None:
        return mark_safe('<span class="muted">unclaimed</span>')
    return _html(
        '<span class="tag ok" data-claimant="{name}">{name}</span>', name=claimant.get_username()
    )


def _claim_button(claimant: Any, claim_url: str | None, unclaim_url: str | None) -> str:
    # Claim while unclaimed; Release only for the claimant (live.js hides it from everyone
    # else by data-only-for: the row is the same HTML for every watcher).
    if claimant is None:
        if not claim_url:
            return ""
        return _html(
            '<button type="button" class="small" hx-post="{url}" hx-swap="none"'
            " data-queue-action>Claim</button>",
            url=claim_url,
        )
    if not unclaim_url:
        return ""
    return _html(
        '<button type="button" class="small" hx-post="{url}" hx-swap="none"'
        ' data-queue-action data-only-for="{name}">Release</button>',
        url=unclaim_url,
        name=claimant.get_username(),
    )


# Reversing a URL costs about as much as the rest of a queue row, and one row's links
# differ from the next row's only in the interrupt id. So each link is reversed once for a
# stand-in id, per URLconf and script prefix (what reverse depends on), and a row puts its
# id in the stand-in's place: only an id of letters, digits, "_" and "-" (the runtime's
# "int_<hex>"), which reverse would insert unchanged. Any other id is reversed as usual.
_STAND_IN_ID = "interrupt-id"
_PLAIN_ID = re.compile(r"[A-Za-z0-9_-]+")


def interrupt_urls(pk: str, *names: str) -> list[str | None]:
    """``url_or_none(name, pk)`` for each of ``names``, pages whose one argument is an
    interrupt id."""
    if not _PLAIN_ID.fullmatch(pk):
        return [url_or_none(name, pk) for name in names]
    resolution = (settings.ROOT_URLCONF, get_urlconf(), get_script_prefix())
    urls = []
    for name in names:
        around = _reversed_around_id(name, *resolution)
        urls.append(around[0] + pk + around[1] if around else url_or_none(name, pk))
    return urls


@functools.lru_cache(maxsize=64)
def _reversed_around_id(name: str, *resolution: Any) -> tuple[str, str] | None:
    # The stand-in's URL before and after the stand-in, or None when there is no such
    # page (or the stand-in is not alone in it). ``resolution`` only keys the cache.
    url = url_or_none(name, _STAND_IN_ID)
    if url is None or url.count(_STAND_IN_ID) != 1:
        return None
    before, _, after = url.partition(_STAND_IN_ID)
    return before, after


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
