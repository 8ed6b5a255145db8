"""Navigation by role: a link appears only when its page exists and the user may use it."""

from django import template
from django.urls import NoReverseMatch, reverse

from portal.accounts import roles

register = template.Library()

# (url name, label, who sees it)
LINKS = [
    ("chat", "Support chat", roles.can_start),
    ("threads", "Threads", lambda user: user.is_authenticated),
    ("queue", "Review queue", roles.can_decide),
    ("history", "History", roles.can_view_history),
    ("audit_trail", "Audit trail", roles.can_view_audit_trail),
    ("metrics", "Metrics", roles.can_view_metrics),
    # Reviewers may open the rules too (history links to them), without a nav link.
    ("rules", "Rules", lambda u: roles.can_manage_rules(u) or roles.can_view_audit_trail(u)),
]


@register.simple_tag(takes_context=True)
def nav_links(context: template.Context) -> list[dict[str, str]]:
    user = context["request"].user
    links = []
    for name, label, allowed in LINKS:
        if not allowed(user):
            continue
        try:
            links.append({"url": reverse(name), "label": label})
        except NoReverseMatch:  # the page is not installed in this build
            continue
    return links
