"""The database away: the 503 the gateway and the pages answer, and one log line for many of them.

The request path does not need the database for a key it has already read (api_keys.py's cache),
and usage waits in Redis (accounting/usage.py), so an outage costs only what must be read anew:
a key not seen since, a page, a batch file. Those are answered 503 `database_unavailable` with
Retry-After, and the next request tries again: a connection that broke is dropped and made anew
(CONN_HEALTH_CHECKS, close_old_connections), and none waits past GP_DATABASE_CONNECT_TIMEOUT.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from django.db.utils import InterfaceError, OperationalError

from fairness.gateway.errors import ApiError

log = logging.getLogger(__name__)

# What the driver raises when it cannot reach the database or lost its connection (Django wraps
# psycopg's and sqlite3's errors in these). Bad data (DataError, IntegrityError) is not an outage.
DATABASE_ERRORS = (OperationalError, InterfaceError)
CODE = "database_unavailable"
RETRY_AFTER_SECONDS = 5

UNAVAILABLE = "The portal's database is unavailable, so this request cannot be served now; try again shortly."
KEY_UNCHECKED = ("The portal's database is unavailable, so this API key cannot be checked now (keys in use "
                 "before it went away keep working); try again shortly.")


class OutageLog:
    """One warning, without the traceback, for the first failure and then at most one per `every`
    seconds with a count of the rest: during an outage every request fails alike, and a traceback
    each would bury the log. Shared by the event loop and the pages' threads."""

    def __init__(self, every: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.every = every
        self.clock = clock
        self._lock = threading.Lock()
        self._logged_at = float("-inf")
        self._since = 0  # failures answered since the last line

    def report(self, exc: BaseException, where: str) -> None:
        with self._lock:
            now = self.clock()
            if now - self._logged_at < self.every:
                self._since += 1
                return
            since, self._logged_at, self._since = self._since, now, 0
        log.warning("database unavailable (%s in %s: %s); %d more failure(s) since the last report",
                    exc.__class__.__name__, where, _first_line(exc), since)


OUTAGE_LOG = OutageLog()


def unavailable(message: str = UNAVAILABLE) -> ApiError:
    """The OpenAI-shaped 503 for a request the database's absence failed (its failure is logged
    where it was caught, through OUTAGE_LOG)."""
    return ApiError(503, message, "database_unavailable", retry_after=RETRY_AFTER_SECONDS)


def _first_line(exc: BaseException) -> str:
    # psycopg's messages run to several lines (the host, the port, a hint); the first says why.
    text = str(exc).strip()
    return text.splitlines()[0] if text else "no message"
