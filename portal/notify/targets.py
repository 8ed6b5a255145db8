"""The one address rule for everything the portal posts to: subscriptions' webhooks and
Slack hooks, outside agents' callbacks, the Slack API and its ``response_url``.

A target is judged twice: its URL's text when it is saved (``url_problem``: http(s), a
host, no credentials, no loopback, private, link-local or reserved address, localhost or
shorthand such as ``0x7f.1``), and the addresses its name resolves to when it is sent
(``open_checked``: looked up within the send's deadline, every address judged, and the
connection made to the address judged, so a name that re-resolves elsewhere between the
check and the connection (DNS rebinding) cannot move it). ``PORTAL_ALLOW_PRIVATE_TARGETS``
lifts the rule (development, and tests whose receivers listen on loopback).
"""

from __future__ import annotations

import ipaddress
import socket
import threading
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings

from agents.schema import text_problem

SETTING = "PORTAL_ALLOW_PRIVATE_TARGETS"


class AddressRefused(OSError):
    """A target's name resolved to an address the portal does not post to."""


def private_allowed() -> bool:
    return bool(getattr(settings, SETTING, False))


def address_kind(host: str) -> str:
    """What ``host`` (a name or an address, as a URL gives it) names inside the portal's
    own network, in words ("a loopback address"), or "" when it is not known to."""
    host = host.rstrip(".").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return "this machine (localhost)"
    try:
        address: ipaddress.IPv4Address | ipaddress.IPv6Address = ipaddress.ip_address(host)
    except ValueError:
        try:
            # Resolvers read shorthand such as 127.1, 2130706433 or 0x7f.1 as IPv4
            # (inet_aton), so it is judged as the address it stands for.
            address = ipaddress.IPv4Address(socket.inet_aton(host))
        except (OSError, ValueError):
            return ""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address.is_loopback:
        return "a loopback address"
    if address.is_unspecified:
        return "an unspecified address"
    if address.is_link_local:
        return "a link-local address"
    if address.is_multicast:
        return "a multicast address"
    if address.is_reserved:
        return "a reserved address"
    if address.is_private or not address.is_global:
        return "a private address"
    return ""


def url_problem(url: str) -> str | None:
    """What makes ``url`` a target the portal may not post to, in words, or None."""
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        return f"not a URL ({exc})"
    try:
        port = parts.port
    except ValueError as exc:
        return f"the port is not a number from 1 to 65535 ({exc})"
    if parts.scheme not in ("http", "https"):
        return (
            f"the scheme {parts.scheme or '(none)'!r} is not allowed; "
            "give an http:// or https:// URL"
        )
    if not parts.hostname:
        return "the URL names no host"
    if text_problem(url) is not None or any(c.isspace() for c in url):
        return "the URL contains spaces or characters it cannot hold"
    if port == 0:
        return "the port is not a number from 1 to 65535 (it is 0)"
    if parts.username is not None or parts.password is not None:
        # It would go out as Basic auth on every try, and sit in the delivery log.
        return "the URL holds a user name or password; leave them out"
    if not private_allowed() and (inside := address_kind(parts.hostname)):
        return (
            f"the host {parts.hostname!r} is {inside}, which the portal does not post to; "
            f"give a public address (operators may allow it with {SETTING})"
        )
    return None


def _lookup(host: str, port: int, timeout: float) -> list[Any]:
    # getaddrinfo takes no timeout, so it runs in a thread of its own that is waited on
    # for the time left; a lookup that hangs is abandoned (the thread ends with it).
    found: list[Any] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            found.extend(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
        except BaseException as exc:  # handed to the waiting thread
            failed.append(exc)

    worker = threading.Thread(target=run, name="portal-lookup", daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        raise TimeoutError(f"looking up {host} took longer than the send's deadline")
    if failed:
        raise failed[0]
    return found


def _open(address: str, port: int, timeout: float) -> socket.socket:
    return socket.create_connection((address, port), timeout=timeout)


def open_checked(host: str, port: int, left: Callable[[], float]) -> socket.socket:
    """A connection to ``host``, made to an address judged by the rule; ``left()`` gives
    the seconds left of the send's deadline (raising ``TimeoutError`` once none are).
    Raises ``AddressRefused`` when the name resolves to an address it may not post to:
    any of them, since a connection would try each in turn."""
    addresses = list(dict.fromkeys(info[4][0] for info in _lookup(host, port, left())))
    if not private_allowed():
        for address in addresses:
            if inside := address_kind(address):
                raise AddressRefused(
                    f"{host} resolves to {address}, {inside}, which the portal does not "
                    f"post to ({SETTING})"
                )
    failure: OSError = OSError(f"{host} resolves to no address")
    for address in addresses:
        try:
            return _open(address, port, left())
        except TimeoutError:
            raise
        except OSError as exc:
            failure = exc
    raise failure
