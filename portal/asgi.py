"""ASGI entry point: HTTP through Django, websockets through Channels.

get_asgi_application() runs first so the app registry is ready before the routing imports
models. HTTP under /api/ goes through the API's own, shorter stack (portal/api/stack.py).
The embedded worker (the demo's in-process run loop) starts here, and only here, so
management commands and tests never start one by accident.
"""

import gc
import os
from typing import Any

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.conf import settings  # noqa: E402

from portal.api.stack import ApiHandler, serves  # noqa: E402
from portal.web.routing import OriginValidator, websocket_urlpatterns  # noqa: E402

api_asgi_app = ApiHandler()


async def http(scope: Any, receive: Any, send: Any) -> None:
    path = scope["path"].removeprefix(scope.get("root_path", ""))
    app = api_asgi_app if serves(path) else django_asgi_app
    await app(scope, receive, send)


# The Origin check compares scheme, host and port (portal/web/routing.py says the rule);
# channels' AllowedHostsOriginValidator compared only the host.
application = ProtocolTypeRouter(
    {
        "http": http,
        "websocket": OriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)

if settings.PORTAL_EMBEDDED_WORKER and os.environ.get("PORTAL_NO_WORKER") != "1":
    from portal.notify.notifier import start_embedded_notifier
    from portal.reviews.expiry import interrupts_expire
    from portal.reviews.rule_decisions import rules_on_pause
    from portal.runs.worker import start_embedded_worker

    # As with run_worker: overdue requests expire between runs, and the decision rules
    # act on each new request once its run has paused.
    start_embedded_worker(expire=interrupts_expire, arrived=rules_on_pause)
    start_embedded_notifier()

# Everything imported and built above lives as long as the process, yet each full garbage
# collection would walk it again, and no websocket of this process gets anything while it
# does. Frozen objects are left out of collections.
gc.freeze()
