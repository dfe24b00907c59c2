"""One run at a time of a periodic task, however many Celery beats send it.

Production runs one beat, but a second one (a second host started with `-B`, a beat left running
through a migration) must be harmless. The tasks whose work is not idempotent take a lock first:
SET NX PX with a random token, so a run that finds the lock taken skips its turn, and a run gives
back only its own lock (task_lock_release.lua compares the token), never one taken after its own
expired. A task meant to run once per period also keeps its lock until `spacing` seconds after it
started, so a second beat's send a moment later finds it still held. The lifetime bounds how long
a worker that died holding a lock keeps the task from running.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import redis

from fairness.store import keyspace

log = logging.getLogger(__name__)

_RELEASE = Path(__file__).with_name("task_lock_release.lua").read_text()


@contextlib.contextmanager
def run_alone(
    client: redis.Redis, task: str, lifetime: float, spacing: float = 0.0,
    clock: Callable[[], float] = time.monotonic,
) -> Iterator[bool]:
    """Yields True when this run holds `task`'s lock and is to do the work, False when another run
    holds it (this one does nothing). `lifetime` (s) must exceed the task's longest run; `spacing`
    (s, less than the beat's period) keeps the lock that long after the start."""
    key = keyspace.task_lock(task)
    token = secrets.token_hex(16)
    if not client.set(key, token, nx=True, px=max(1, round(max(lifetime, spacing) * 1000))):
        log.info("%s skipped: another run holds its lock", task)
        yield False
        return
    started = clock()
    try:
        yield True
    finally:
        keep = max(0, round((spacing - (clock() - started)) * 1000))
        try:
            client.eval(_RELEASE, 1, key, token, keep)
        except redis.RedisError as exc:  # the lock expires by itself; the work is done either way
            log.warning("could not give back the lock of %s: %s", task, exc)
