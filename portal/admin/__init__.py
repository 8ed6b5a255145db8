"""The Django admin: a read-only window on the portal's tables, plus deciding requests and
a few bulk actions, each through the service its page uses and only for those who hold its
permission. Services are the only writers, so nothing here edits a row directly.
Importing the modules below registers every model admin. More in docs/architecture.md
(``## admin``).
"""

from django.contrib import admin

from portal.admin import audit, notifications, requests, rules, threads  # noqa: F401

admin.site.site_header = "Reviewer portal administration"
admin.site.site_title = "Reviewer portal admin"
admin.site.index_title = "Requests, decisions and conversations"
