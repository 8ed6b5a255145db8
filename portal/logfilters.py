"""Logging filters named in ``settings.LOGGING``."""

from __future__ import annotations

import logging


class RefusalsWithoutTraceback(logging.Filter):
    """A 4xx the portal meant to answer (a ``PermissionDenied``, an ``Http404``) is logged
    as one line: Django attaches the exception to the record, which printed a traceback
    for every expected refusal and buried the real errors. A 5xx keeps its traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        status = getattr(record, "status_code", None)
        if isinstance(status, int) and 400 <= status < 500:
            record.exc_info = None
            record.exc_text = None
        return True
