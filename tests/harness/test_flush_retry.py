"""The teardown's flush is tried again only when PostgreSQL ended it as a deadlock's loser."""

from __future__ import annotations

import pytest
from django.core.management.base import CommandError
from django.db.utils import OperationalError, ProgrammingError
from django.test import TransactionTestCase

from tests.support.flush_retry import ATTEMPTS, retrying


def failing(causes: list[Exception]):
    calls = []

    def flush_once(case: TransactionTestCase) -> None:
        calls.append(case)
        if len(calls) <= len(causes):
            raise CommandError("Database test couldn't be flushed.") from causes[len(calls) - 1]

    return flush_once, calls


def test_a_flush_that_lost_a_deadlock_is_tried_again_until_it_succeeds():
    flush_once, calls = failing([OperationalError("deadlock detected\nDETAIL: Process 1 waits ...")])
    retrying(flush_once)(TransactionTestCase())
    assert len(calls) == 2


def test_a_flush_that_keeps_losing_fails_after_its_attempts():
    deadlock = OperationalError("deadlock detected")
    flush_once, calls = failing([deadlock] * ATTEMPTS)
    with pytest.raises(CommandError):
        retrying(flush_once)(TransactionTestCase())
    assert len(calls) == ATTEMPTS


@pytest.mark.parametrize("cause", [OperationalError("connection refused"), ProgrammingError("no such table")])
def test_any_other_failure_fails_at_once(cause):
    flush_once, calls = failing([cause])
    with pytest.raises(CommandError):
        retrying(flush_once)(TransactionTestCase())
    assert len(calls) == 1
