"""Filters for the portal's log (settings.LOGGING)."""

from __future__ import annotations

import logging


class RefusalsWithoutTraceback(logging.Filter):
    """A refused page (403: PermissionDenied raised on purpose) is the portal working, not failing:
    Django's one warning line says it, without the traceback of the exception that refused it."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "status_code", None) == 403:
            record.exc_info = None
            record.exc_text = None
        return True
