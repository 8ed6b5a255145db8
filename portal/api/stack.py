"""The API's own request stack under ASGI: Django's handler with ``settings.API_MIDDLEWARE``.

A token-checked JSON request needs no session, messages, CSRF, clickjacking header, htmx
or login lockout, and under ASGI each ``MiddlewareMixin`` hook costs a thread hand-off.
``portal/asgi.py`` sends the paths ``serves`` names here; the rest (and the docs page, a
page like the others) go through ``settings.MIDDLEWARE``.
"""

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from asgiref.sync import ThreadSensitiveContext
from django.conf import settings
from django.core.handlers.asgi import ASGIHandler
from django.http import HttpRequest
from django.middleware.security import SecurityMiddleware

from portal.inputs import API_PREFIX

DOCS_PREFIX = f"{API_PREFIX}docs"


def serves(path: str) -> bool:
    """Whether the API's stack answers ``path`` (a path below the script prefix)."""
    return path.startswith(API_PREFIX) and not path.startswith(DOCS_PREFIX)


class ApiHandler(ASGIHandler):
    """Django's ASGI handler, built from ``settings.API_MIDDLEWARE``, that lends each
    request a thread kept from earlier requests.

    Django's handler gives each request a thread of its own for its sync code, started
    for it and joined after it. Here a request borrows an idle one instead (a
    single-thread executor, as asgiref's ``ThreadSensitiveContext`` takes it), so its
    sync code still runs on one thread that no other request uses meanwhile.
    """

    # Idle threads kept for the next requests; more, started under a burst, are let go.
    KEEP_IDLE = 32

    def __init__(self) -> None:
        super().__init__()
        self._idle: list[ThreadPoolExecutor] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await super().__call__(scope, receive, send)  # refuses it
            return
        lent = self._idle.pop() if self._idle else ThreadPoolExecutor(1, "api-request")
        try:
            async with ThreadSensitiveContext(executor=lent):
                await self.handle(scope, receive, send)
        finally:
            # A request whose client left ends with Django's request_finished on this same
            # thread, queued behind whatever sync code it left running, so the thread comes
            # back free. Only a server cancelling the app itself could return it busy; the
            # next borrower's calls would then wait behind that code, never beside it.
            if len(self._idle) < self.KEEP_IDLE:
                self._idle.append(lent)
            else:
                lent.shutdown(wait=False)

    def load_middleware(self, is_async: bool = False) -> None:
        # BaseHandler.load_middleware reads settings.MIDDLEWARE; it runs once, at start.
        site = settings.MIDDLEWARE
        settings.MIDDLEWARE = settings.API_MIDDLEWARE
        try:
            super().load_middleware(is_async)
        finally:
            settings.MIDDLEWARE = site


class SecurityHeaders(SecurityMiddleware):
    """Django's ``SecurityMiddleware`` run on the event loop: its hooks only read the
    request and set headers, so the thread hand-off ``MiddlewareMixin`` makes for each
    (in case a hook touches the database) buys nothing. It also checks the Host header
    against ``ALLOWED_HOSTS`` (400 otherwise), which the site's ``CommonMiddleware`` does."""

    async def __acall__(self, request: HttpRequest) -> Any:
        request.get_host()  # raises DisallowedHost
        response = self.process_request(request)
        if response is None:
            response = await self.get_response(request)  # type: ignore[misc]
        return self.process_response(request, response)
