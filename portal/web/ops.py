"""For the operator's monitoring: ``/healthz`` (anyone) and the Prometheus metrics
(a bearer token or the metrics permission). Both read ``portal.audit.observability``."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import path
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from portal.accounts import roles
from portal.audit import observability


@require_GET
@never_cache
def healthz(request: HttpRequest) -> HttpResponse:
    """200 when the database, Redis (if configured) and, if a limit is set, the workers'
    heartbeats are fine; otherwise 503 with ``problems`` naming each thing wrong."""
    report = observability.health()
    return JsonResponse(report.as_json(), status=200 if report.ok else 503)


@require_GET
@never_cache
def prometheus_metrics(request: HttpRequest) -> HttpResponse:
    # No login redirect: a scraper wants a status code. The token first, so a scraper
    # never needs a session; a person with the metrics permission may look too.
    header = request.headers.get("Authorization", "")
    if header:
        if not observability.token_matches(header):
            return _unauthorized("The bearer token is not this portal's PORTAL_METRICS_TOKEN.")
    elif not request.user.is_authenticated:
        return _unauthorized(
            "Send Authorization: Bearer <PORTAL_METRICS_TOKEN>, or log in as a user with "
            "the metrics permission."
        )
    elif not roles.can_view_metrics(request.user):
        return HttpResponse(
            "The metrics need the metrics permission.",
            status=403,
            content_type="text/plain; charset=utf-8",
        )
    return HttpResponse(
        observability.metrics_text(), content_type=observability.CONTENT_TYPE_LATEST
    )


def _unauthorized(message: str) -> HttpResponse:
    response = HttpResponse(message, status=401, content_type="text/plain; charset=utf-8")
    response["WWW-Authenticate"] = 'Bearer realm="metrics"'
    return response


urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("metrics/prometheus", prometheus_metrics, name="prometheus_metrics"),
]
