"""Throttling: each token may make ``settings.PORTAL_API_RATE`` requests; more get 429."""

from django.conf import settings
from django.http import HttpRequest
from ninja.throttling import SimpleRateThrottle


class TokenRateThrottle(SimpleRateThrottle):
    """At most ``settings.PORTAL_API_RATE`` requests per token (e.g. ``120/min``; empty:
    no limit). Counted in the default cache, which is Redis when ``REDIS_URL`` is set, so
    every web process shares one count."""

    scope = "token"

    def __init__(self) -> None:
        super().__init__(rate=settings.PORTAL_API_RATE or "1/s")

    def allow_request(self, request: HttpRequest) -> bool:
        # Read each time, so the setting can change without rebuilding the API.
        if not settings.PORTAL_API_RATE:
            return True
        self.rate = settings.PORTAL_API_RATE
        self.num_requests, self.duration = self.parse_rate(self.rate)
        return super().allow_request(request)

    def get_cache_key(self, request: HttpRequest) -> str | None:
        token = getattr(request, "api_token", None)
        if token is None:
            return None
        # Keyed by the token's hash, not its row id: an id can come back (a row deleted
        # and its id reused, a rolled-back test), and the new token would inherit the
        # old one's count.
        return self.cache_format % {"scope": self.scope, "ident": token.token_hash}
