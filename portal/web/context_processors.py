from django.contrib.auth.models import AnonymousUser
from django.http import HttpRequest

from portal.accounts import roles


def role_flags(request: HttpRequest) -> dict[str, object]:
    # No user on the API's stack (portal/api/stack.py), which has no login middleware: a
    # page it renders before json_refusals answers in JSON (a path no route serves).
    user = getattr(request, "user", None) or AnonymousUser()
    return {
        "can_start": roles.can_start(user),
        "can_decide": roles.can_decide(user),
        "can_view_all": roles.can_view_all(user),
        "can_view_history": roles.can_view_history(user),
        "can_export_history": roles.can_export_history(user),
        "can_view_metrics": roles.can_view_metrics(user),
        "can_view_audit_trail": roles.can_view_audit_trail(user),
    }
