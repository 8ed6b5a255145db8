from django.apps import AppConfig


class PortalConfig(AppConfig):
    name = "portal"
    verbose_name = "Reviewer portal"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Connects the receivers that close a user's sockets when their rights change,
        # those that record logins in the audit trail, and those that revoke API tokens.
        from portal import checks  # noqa: F401  (registers the system checks)
        from portal.accounts import logins, roles, tokens  # noqa: F401
        from portal.notify import broadcast
        from portal.web import live, signals  # noqa: F401

        roles.guard_usernames()
        # Live updates carry HTML rendered by web, in every process that publishes (the
        # servers, the worker, the notifier): each one starts here.
        broadcast.set_renderer(live)
