"""How a websocket reaches a consumer: the Origin check, then the routes. Consumers only
subscribe and forward; they never write.

More in docs/architecture.md (`web/routing.py`)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http.request import split_domain_port, validate_host
from django.urls import path, re_path
from django.utils.http import is_same_domain

from portal.web.consumers import NotFoundConsumer, QueueConsumer, ThreadConsumer

websocket_urlpatterns = [
    path("ws/threads/<uuid:thread_id>/", ThreadConsumer.as_asgi()),
    path("ws/queue/", QueueConsumer.as_asgi()),
    # Anything else is closed with 4404 rather than failing the handshake with an error.
    re_path(r"", NotFoundConsumer.as_asgi()),
]

DEFAULT_PORTS = {"http": 80, "https": 443}
Origin = tuple[str, str, int]


def _header(scope: dict[str, Any], name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key == name:
            return bytes(value).decode("latin1")
    return None


def _parse(origin: str) -> Origin | None:
    """(scheme, host, port) of an http(s) origin; None for anything else."""
    try:
        parts = urlsplit(origin.strip())
        port = parts.port
    except ValueError:  # a port that is not a number, or out of range
        return None
    scheme, host = parts.scheme.lower(), (parts.hostname or "")
    if scheme not in DEFAULT_PORTS or not host:
        return None
    return scheme, host, port or DEFAULT_PORTS[scheme]


def _is_secure(scope: dict[str, Any]) -> bool:
    if scope.get("scheme") == "wss":
        return True
    proxy = getattr(settings, "SECURE_PROXY_SSL_HEADER", None)
    if proxy:
        meta_name, expected = proxy
        header = meta_name.removeprefix("HTTP_").replace("_", "-").lower().encode()
        value = _header(scope, header)
        return value is not None and value.split(",")[0].strip() == expected
    return False


def _allowed_hosts() -> list[str]:
    hosts = list(settings.ALLOWED_HOSTS)
    if settings.DEBUG and not hosts:  # as Django's HttpRequest.get_host does
        hosts = [".localhost", "127.0.0.1", "[::1]"]
    return hosts


def _own_origin(scope: dict[str, Any]) -> Origin | None:
    host = _header(scope, b"host")
    if not host:
        return None
    domain, _port = split_domain_port(host)
    if not domain or not validate_host(domain, _allowed_hosts()):
        return None
    return _parse(f"{'https' if _is_secure(scope) else 'http'}://{host}")


def _trusted(origin: Origin) -> bool:
    scheme, host, port = origin
    for entry in settings.CSRF_TRUSTED_ORIGINS:
        wildcard = "://*." in entry
        trusted = _parse(entry.replace("://*.", "://", 1) if wildcard else entry)
        if trusted is None or trusted[0] != scheme or trusted[2] != port:
            continue
        if host == trusted[1] or (wildcard and is_same_domain(host, "." + trusted[1])):
            return True
    return False


def origin_allowed(scope: dict[str, Any]) -> bool:
    """Whether the handshake in ``scope`` comes from a page this site trusts (see the
    module docstring for the rule)."""
    raw = _header(scope, b"origin")
    origin = _parse(raw) if raw else None
    if origin is None:
        return False
    return origin == _own_origin(scope) or _trusted(origin)


class OriginValidator:
    """ASGI middleware: refuse a websocket handshake whose Origin is not this site's."""

    def __init__(self, application: Any) -> None:
        self.application = application

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        if scope["type"] == "websocket" and not origin_allowed(scope):
            return await WebsocketDenier.as_asgi()(scope, receive, send)
        return await self.application(scope, receive, send)
