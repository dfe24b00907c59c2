"""The batch runner: every unfinished batch it can claim, run in one event loop through the
gateway's own request path (line_runner), for one slice of time.

Durability comes from the database, not the process:
- A batch is held by one runner at a time: a claim (Batch.runner, a token, and runner_seen_at,
  renewed every third of GP_BATCH_CLAIM_SECONDS). A runner that dies stops renewing, and the
  next runner takes the batch over once the claim is that old.
- Each line is pending (to run, or running: only its runner knows which), done or failed. The
  lines a dead runner was running are pending still: their engine requests died with its
  connections, and the next runner runs them again.
- A line's result is written only while its writer holds the batch's claim (in the same
  statement), so a line completes once however often runners die and resume it. One write per
  line: its result and the batch's count, in one transaction.

Each batch keeps as many lines in flight as its key could get slots (the deployment's slots when
its tier borrows idle ones, its caps otherwise) and half as many again waiting in admission's
queue, so a freed slot is taken at once. Admission decides who runs: the runner never outruns a
live client of the same key, and interactive users keep their head start. Its lines borrow
revocably (GrantWatch): every slot while nobody chats, all but a spare while chats come; a
line asked back is dropped at the engine and sent again from its place in line (gateway/views.py).

At the end of its slice a runner starts no more lines and gives back those still waiting in
admission's queue (nothing ran for them yet), lets the ones running on an engine finish, and
releases its batches for the next runner: work is never thrown away to end a slice.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import datetime as dt
import functools
import json
import logging
import secrets
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connection, connections, transaction
from django.db.models import F, Q

from fairness.batch import line_runner, result_files
from fairness.batch.failures import PASSING_ERRORS, batch_failure, error_list, mark_failed
from fairness.batch.intake import take_in
from fairness.gateway import api_keys
from fairness.gateway.api_keys import KeyInfo
from fairness.gateway.errors import ApiError
from fairness.gateway.runtime import GatewayRuntime
from fairness.models import Batch, BatchLine, BatchLineState, BatchStatus
from fairness.scheduling.admission import Admission, Demand, Grant, OnHold
from fairness.scheduling.directory import ReplicaDirectory
from fairness.store.redis_lane import Command

log = logging.getLogger(__name__)

MAX_BACKOFF_SECONDS = 30.0
FETCH_ROWS = 200


def _db(function: Callable[..., Any]) -> Callable[..., Any]:
    """An ORM step run off the event loop. Its connection is kept for the runner's slice (with
    CONN_MAX_AGE 0, close_old_connections would open a new one for every step: most of a line's
    cost on PostgreSQL), and replaced only once an error left it unusable."""

    def checked(*args: Any, **kwargs: Any) -> Any:
        if connection.errors_occurred and connection.connection is not None and not connection.is_usable():
            connection.close()
        return function(*args, **kwargs)

    return sync_to_async(checked)


@dataclass(frozen=True)
class PendingLine:
    pk: int
    index: int
    body: str


class LineInFlight:
    """A line's task, and whether its request holds a slot (admission granted it) or still waits."""

    def __init__(self) -> None:
        self.task: asyncio.Task[None] | None = None
        self.granted = False
        self.revoked = False  # admission asked its borrowed slot back: it runs again later


_current_line: contextvars.ContextVar[LineInFlight | None] = contextvars.ContextVar("batch_line", default=None)


class GrantWatch:
    """The runtime's admission, as the runner's lines use it. A line's borrowing is revocable (it
    may take the reserve too, and gives the slot back when an eligible request finds none: the
    line is stopped, stays pending and runs again later); and it notes when a line's request is
    granted a slot (and again after a failed replica moved it back into the queue)."""

    def __init__(self, admission: Admission) -> None:
        self._admission = admission
        self._lines: dict[str, LineInFlight] = {}  # lease id -> its line
        admission.on_revoke = self._revoke

    async def acquire(self, demand: Demand, handle: str | None = None, on_hold: OnHold | None = None) -> Grant:
        grant = await self._admission.acquire(dataclasses.replace(demand, revocable=demand.borrow), handle, on_hold)
        self._granted(grant)
        return grant

    async def move(self, grant: Grant, avoid: str, on_hold: OnHold | None = None) -> Grant:
        self._mark(False)
        moved = await self._admission.move(grant, avoid, on_hold)
        self._granted(moved)
        return moved

    async def release(self, grant: Grant, also: Sequence[Command] = (), charge: float = 0.0) -> None:
        self._lines.pop(grant.lease_id, None)
        await self._admission.release(grant, also, charge)

    def when_revoked(self, lease_id: str, callback: Callable[[], None] | None) -> None:
        self._admission.when_revoked(lease_id, callback)

    def _granted(self, grant: Grant) -> None:
        self._mark(True)
        line = _current_line.get()
        if line is not None:
            self._lines[grant.lease_id] = line

    def _revoke(self, lease_id: str) -> None:
        line = self._lines.pop(lease_id, None)
        if line is not None and line.task is not None and not line.task.done():
            line.revoked = True
            line.task.cancel()

    @staticmethod
    def _mark(granted: bool) -> None:
        line = _current_line.get()
        if line is not None:
            line.granted = granted


def window(key: KeyInfo, directory: ReplicaDirectory) -> int:
    """Lines in flight for one batch: the slots its key could hold, and half as many again waiting
    in admission's queue, so that slots freed together (lines of one length end together) are
    taken again within admission's own round trip rather than the runner's."""
    slots = sum(r.max_num_seqs for r in directory.all if r.serves(key.tier.name))
    if not key.tier.borrow_idle_slots:
        slots = min(slots, key.tier.per_key_concurrency, key.tier.pool_concurrency or slots)
    slots = max(1, slots)
    return slots + max(2, slots // 2)


class BatchRun:
    """One claimed batch in this runner."""

    def __init__(self, runner: BatchRunner, batch: Batch) -> None:
        self.runner = runner
        self.batch = batch
        self.key: KeyInfo | None = None
        self.key_error: ApiError | None = None
        self.key_checked = float("-inf")
        self.pending: deque[PendingLine] = deque()
        self.inflight: dict[int, LineInFlight] = {}
        self.exhausted = False  # no pending line left in the database
        self.reloaded_at = float("-inf")

    async def step(self, accepting: bool) -> bool:
        """Move the batch on; True once this runner is done with it (ended, or left to the next
        runner at the end of the slice)."""
        if time.monotonic() - self.reloaded_at >= self.runner.step_seconds:
            self.batch = await _reload(self.batch.pk)  # a cancel, or a new status, shows within a step
            self.reloaded_at = time.monotonic()
        batch = self.batch
        if batch.finished:
            await self.abort()
            return True
        await self._check_key()
        if batch.status == BatchStatus.VALIDATING:
            if self.key_error is not None:
                return await self._end(BatchStatus.FAILED)
            directory = await self.runner.runtime.refresh()
            assert self.key is not None
            # A long file takes a while: say this runner still holds the batch as it goes.
            held = functools.partial(_renew_claims, self.runner.token, {batch.pk})
            await _db(take_in)(batch, self.key, directory, lambda: bool(held(self.runner.moment())))
            self.reloaded_at = float("-inf")  # its new status, at the next step
            return False
        if batch.status == BatchStatus.FINALIZING:
            return await self._end(BatchStatus.COMPLETED)
        if batch.status == BatchStatus.CANCELLING:
            await self.abort()
            return await self._end(BatchStatus.CANCELLED)
        if self.runner.now() >= batch.expires_at.timestamp():
            await self.abort()
            await _db(result_files.expire_unfinished)(batch)
            return await self._end(BatchStatus.EXPIRED)
        if self.key_error is not None:
            await self.abort()
            await _db(_fail_unfinished)(batch, self.key_error)
            return await self._end(BatchStatus.FAILED)
        if accepting:
            await self._fill()
        elif any(not line.granted for line in self.inflight.values()):
            await self.abort(only_waiting=True)  # the slice is over: keep only what runs
        if not self.inflight and self.exhausted and not self.pending and not await _db(_lines_left)(batch.pk):
            return await self._end(BatchStatus.COMPLETED)
        return not accepting and not self.inflight

    async def abort(self, only_waiting: bool = False) -> None:
        """Stop the lines in flight (their engine requests are aborted, their leases given back,
        as for a client that leaves); they stay pending. `only_waiting`: only those still
        waiting for a slot."""
        tasks = [line.task for line in self.inflight.values()
                 if line.task is not None and not (only_waiting and line.granted)]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if tasks:
            self.exhausted = False  # they are to run again: look before calling the batch done

    def tasks(self) -> list[asyncio.Task[None]]:
        return [line.task for line in self.inflight.values() if line.task is not None]

    async def fail(self, reason: ApiError) -> None:
        """End the batch as failed, saying why: its lines in flight stopped, those not run yet
        failed with the reason, and the files written with what had ended."""
        await self.abort()
        try:
            await _db(_fail_unfinished)(self.batch, reason)
            await self._end(BatchStatus.FAILED, reason)
        except Exception:
            if not await _db(mark_failed)(self.batch.pk, self.runner.token, error_list(reason)):
                raise
            log.exception("batch %s: failed without its files, which could not be written", self.batch.public_id)

    async def _end(self, status: BatchStatus, reason: ApiError | None = None) -> bool:
        reason = reason or (self.key_error if status == BatchStatus.FAILED else None)
        errors = error_list(reason) if reason is not None else None
        if not await _db(result_files.finalize)(self.batch, self.runner.token, status, errors):
            log.warning("batch %s: lost its claim before it could end", self.batch.public_id)
        return True

    async def _check_key(self) -> None:
        now = time.monotonic()
        if now - self.key_checked < settings.GP_BATCH_KEY_CHECK_SECONDS:
            return
        self.key_checked = now
        key = await api_keys.load_by_id(self.batch.api_key_id)
        try:
            if key is None:
                raise ApiError(401, "The API key that created this batch no longer exists.", "invalid_api_key")
            api_keys.check_usable(key)
        except ApiError as exc:
            self.key_error = exc
            return
        self.key = key

    async def _fill(self) -> None:
        assert self.key is not None
        room = window(self.key, await self.runner.runtime.refresh()) - len(self.inflight)
        while room > 0:
            if not self.pending and not self.exhausted:
                fetched = await _db(_pending_lines)(self.batch.pk, set(self.inflight))
                self.pending.extend(fetched)
                self.exhausted = len(fetched) < FETCH_ROWS
            if not self.pending:
                return
            line = self.pending.popleft()
            flight = self.inflight[line.pk] = LineInFlight()
            flight.task = asyncio.get_running_loop().create_task(self._run_line(line, flight))
            room -= 1

    async def _run_line(self, line: PendingLine, flight: LineInFlight) -> None:
        batch, key = self.batch, self.key
        assert key is not None
        _current_line.set(flight)  # this task's own context: GrantWatch marks it granted
        try:
            tries, backoff = 0, 1.0
            while True:
                # Unique per runner and try (the usage records keep one row per request id), and
                # within their 40 characters: the line's row id names the batch and the line.
                request_id = f"batch-{line.pk}-{self.runner.token[:8]}-{tries}"
                answer = await line_runner.send(self.runner.runtime, key, batch.endpoint, line.body, request_id,
                                                wait_until=batch.expires_at.timestamp())
                tries += 1
                if answer.ok or not answer.passing(tries):
                    break
                await asyncio.sleep(min(answer.retry_after or backoff, MAX_BACKOFF_SECONDS))
                backoff = min(backoff * 2, MAX_BACKOFF_SECONDS)
            await asyncio.shield(_db(_record)(batch.pk, line.pk, self.runner.token, answer, request_id))
        except asyncio.CancelledError:
            if not flight.revoked:
                raise
            self.exhausted = False  # admission asked its slot back: it runs again, later
        except PASSING_ERRORS:  # the database away: the line runs again, in this slice or the next
            log.exception("batch %s: line %d could not run; it stays pending", batch.public_id, line.index)
            self.exhausted = False
        except Exception:  # it would fail again: the line's error, not a line to run for ever
            log.exception("batch %s: line %d failed in the portal", batch.public_id, line.index)
            await self._record_failure(line)
        finally:
            self.inflight.pop(line.pk, None)

    async def _record_failure(self, line: PendingLine) -> None:
        error = ApiError(500, "The portal failed to run or record this request.", "internal_error")
        answer = line_runner.Answer(500, json.dumps(error.body()), error.code)
        request_id = f"batch-{line.pk}-{self.runner.token[:8]}-failed"
        try:
            await asyncio.shield(_db(_record)(self.batch.pk, line.pk, self.runner.token, answer, request_id))
        except Exception:
            log.exception("batch %s: line %d: its failure could not be recorded; it stays pending",
                          self.batch.public_id, line.index)
            self.exhausted = False


class BatchRunner:
    """Claims and runs batches for one slice of time, then gives them back (the next beat's
    runner takes them on)."""

    def __init__(
        self, runtime: GatewayRuntime, *, slice_seconds: float | None = None, claim_seconds: float | None = None,
        clock: Callable[[], float] = time.time, step_seconds: float = 0.5,
    ) -> None:
        self.runtime = runtime
        if not isinstance(runtime.admits, GrantWatch):
            runtime.admits = GrantWatch(runtime.admission)
        self.token = secrets.token_hex(16)
        self.slice_seconds = slice_seconds if slice_seconds is not None else settings.GP_BATCH_SLICE_SECONDS
        self.claim_seconds = claim_seconds if claim_seconds is not None else settings.GP_BATCH_CLAIM_SECONDS
        self.now = clock
        self.step_seconds = step_seconds
        self.runs: dict[int, BatchRun] = {}

    async def run(self) -> int:
        """Run until the slice ends (then finish what is in flight), or nothing is left to claim.
        Returns how many batches it held."""
        deadline = self.now() + self.slice_seconds
        held = 0
        next_claim = next_renewal = 0.0
        try:
            while True:
                accepting = self.now() < deadline
                if accepting and time.monotonic() >= next_claim:
                    next_claim = time.monotonic() + 1.0
                    for batch in await _db(_claim)(self.token, self.moment(-self.claim_seconds), self.moment(),
                                                   set(self.runs)):
                        self.runs[batch.pk] = BatchRun(self, batch)
                        held += 1
                if not self.runs:
                    return held
                if time.monotonic() >= next_renewal:
                    next_renewal = time.monotonic() + self.claim_seconds / 3
                    await self._renew()
                for pk, run in list(self.runs.items()):
                    if await self._step(run, accepting):
                        del self.runs[pk]
                await self._wait()
        finally:
            for run in self.runs.values():
                with contextlib.suppress(Exception):
                    await run.abort()
            await _db(_release)(self.token)
            await _db(connections.close_all)()

    async def _step(self, run: BatchRun, accepting: bool) -> bool:
        """Move one batch on (True once this runner is done with it). Whatever goes wrong in it is
        its own: it ends as failed, saying why, and the other batches go on."""
        try:
            return await run.step(accepting)
        except PASSING_ERRORS:
            # Left to a later runner: its claim, no longer renewed, goes stale.
            log.exception("batch %s: the database failed it; a later runner takes it on", run.batch.public_id)
            await run.abort()
            return True
        except Exception as exc:
            log.exception("batch %s failed; it ends, the other batches go on", run.batch.public_id)
            try:
                await run.fail(batch_failure(exc))
            except Exception:
                log.exception("batch %s: could not be ended; a later runner takes it on", run.batch.public_id)
            return True

    def moment(self, offset: float = 0.0) -> dt.datetime:
        return dt.datetime.fromtimestamp(self.now() + offset, tz=dt.UTC)

    async def _renew(self) -> None:
        """Say this runner still holds its batches; drop any it lost (it was too slow to say so,
        and another runner has taken it over)."""
        still = await _db(_renew_claims)(self.token, set(self.runs), self.moment())
        for pk in set(self.runs) - still:
            log.warning("batch %s: claim lost to another runner", self.runs[pk].batch.public_id)
            run = self.runs.pop(pk)
            await run.abort()

    async def _wait(self) -> None:
        """Until a line ends or a step's time has passed."""
        tasks = [task for run in self.runs.values() for task in run.tasks()]
        if tasks:
            await asyncio.wait(tasks, timeout=self.step_seconds, return_when=asyncio.FIRST_COMPLETED)
        else:
            await asyncio.sleep(self.step_seconds)


def _claim(token: str, stale_before: dt.datetime, now: dt.datetime, held: set[int]) -> list[Batch]:
    """Take every unfinished batch no live runner holds."""
    claimed = []
    free = Q(runner="") | Q(runner_seen_at__lt=stale_before)
    for pk in Batch.objects.unfinished().filter(free).exclude(pk__in=held).order_by("id").values_list("pk", flat=True):
        if Batch.objects.filter(free, pk=pk, status__in=Batch.UNFINISHED).update(runner=token, runner_seen_at=now):
            claimed.append(Batch.objects.select_related("input_file").get(pk=pk))
    return claimed


def _renew_claims(token: str, held: set[int], now: dt.datetime) -> set[int]:
    Batch.objects.filter(pk__in=held, runner=token).update(runner_seen_at=now)
    return set(Batch.objects.filter(pk__in=held, runner=token).values_list("pk", flat=True))


def _release(token: str) -> None:
    Batch.objects.filter(runner=token).update(runner="", runner_seen_at=None)


def _reload(pk: int) -> Any:
    return _db(lambda: Batch.objects.select_related("input_file").get(pk=pk))()


def _pending_lines(batch_pk: int, skip: set[int]) -> list[PendingLine]:
    rows = (
        BatchLine.objects.filter(batch_id=batch_pk, state=BatchLineState.PENDING)
        .exclude(pk__in=skip)
        .order_by("index")
        .values_list("pk", "index", "body")[:FETCH_ROWS]
    )
    return [PendingLine(*row) for row in rows]


def _lines_left(batch_pk: int) -> bool:
    return BatchLine.objects.filter(batch_id=batch_pk, state=BatchLineState.PENDING).exists()


def _record(batch_pk: int, line_pk: int, runner: str, answer: line_runner.Answer, request_id: str) -> None:
    """The line's result and the batch's count, once, and only if `runner` still holds the batch
    (a runner that lost it, too slow to renew its claim, writes nothing: the new one runs it)."""
    state = BatchLineState.DONE if answer.ok else BatchLineState.FAILED
    with transaction.atomic():
        written = BatchLine.objects.filter(pk=line_pk, state=BatchLineState.PENDING, batch__runner=runner).update(
            state=state, status_code=answer.status, response=answer.body, request_id=request_id,
            error_code=answer.code or "", finished_at=dt.datetime.now(tz=dt.UTC),
        )
        if written:
            counter = "completed" if answer.ok else "failed"
            Batch.objects.filter(pk=batch_pk).update(**{counter: F(counter) + 1})


def _fail_unfinished(batch: Batch, error: ApiError) -> None:
    """The key can no longer run the batch: what did not run goes to the error file, saying why."""
    with transaction.atomic():
        failed = BatchLine.objects.filter(batch=batch, state=BatchLineState.PENDING).update(
            state=BatchLineState.FAILED, error_code=error.code or "", error_message=error.message,
            finished_at=dt.datetime.now(tz=dt.UTC),
        )
        Batch.objects.filter(pk=batch.pk).update(failed=F("failed") + failed)
