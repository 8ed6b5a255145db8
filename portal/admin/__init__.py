"""The Django admin: a read-only window on the portal's tables, plus deciding requests and
a few bulk actions, each through the service its page uses and only for those who hold its
permission. Services are the only writers, so nothing here edits a row directly.
Importing the modules below registers every model admin. More in docs/architecture.md
(``## admin``).
"""

from portal.admin import audit, notifications, requests, threads  # noqa: F401
