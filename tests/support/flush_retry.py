"""A live test's teardown empties its tables while the gateways it started may still be writing
(usage settled after the last byte, an upload's reservation given back). PostgreSQL can end the
TRUNCATE as the loser of a deadlock with such a write; the flush is then simply tried again."""

from __future__ import annotations

from collections.abc import Callable

from django.core.management.base import CommandError
from django.db.utils import OperationalError
from django.test import TransactionTestCase

ATTEMPTS = 3


def lost_a_deadlock(error: CommandError) -> bool:
    cause = error.__cause__
    return isinstance(cause, OperationalError) and "deadlock detected" in str(cause)


def retrying(flush_once: Callable[[TransactionTestCase], None]) -> Callable[[TransactionTestCase], None]:
    def flush(self: TransactionTestCase) -> None:
        for attempt in range(ATTEMPTS):
            try:
                return flush_once(self)
            except CommandError as error:
                if attempt == ATTEMPTS - 1 or not lost_a_deadlock(error):
                    raise

    return flush


def install() -> None:
    TransactionTestCase._fixture_teardown = retrying(TransactionTestCase._fixture_teardown)  # type: ignore[method-assign]
