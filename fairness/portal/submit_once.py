"""Forms that act once: a repeated submission (a reload, a double click) is recognised.

A form that mints something carries a random token. The first POST with it claims the token in
Redis (SET NX: atomic across every web process) and records what it made; a later POST with the
same token finds the claim and is told what the first one did instead of minting again. A
browser's reload of the "key issued" page re-sends the form, so without this every reload would
issue another live key.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from fairness.store import keyspace
from fairness.store.redis_clients import redis_sync

# A form older than this is taken as new: long enough for any reload or retry.
CLAIM_SECONDS = 24 * 3600
TOKEN_PATTERN = r"^[A-Za-z0-9_-]{16,64}$"


def new_token() -> str:
    return secrets.token_urlsafe(16)


class Repeated(Exception):
    """This form was submitted before; `outcome` is what that submission recorded ("" while it runs)."""

    def __init__(self, outcome: str) -> None:
        super().__init__(outcome)
        self.outcome = outcome


@contextmanager
def first_submission(token: str) -> Iterator[Callable[[str], None]]:
    """Claim `token` or raise Repeated; yields a function recording the outcome for repeats.

    An action that fails gives its token back, so submitting the same form again retries it.
    """
    client = redis_sync()
    if not client.set(keyspace.submitted_form(token), "", nx=True, ex=CLAIM_SECONDS):
        outcome = client.get(keyspace.submitted_form(token)) or b""
        raise Repeated(outcome.decode() if isinstance(outcome, bytes) else outcome)

    def record(outcome: str) -> None:
        client.set(keyspace.submitted_form(token), outcome, ex=CLAIM_SECONDS)

    try:
        yield record
    except BaseException:
        client.delete(keyspace.submitted_form(token))
        raise
