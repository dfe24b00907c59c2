"""How long a waiting request will still wait: admission replayed forward from a snapshot.

A queue's length says little here. Admission grants in its own order (head starts, ageing, fair
share), skips a ticket whose person or tier is at its cap, lets the tickets of a person whose cap
just opened age only from then, and lets interactive requests that arrive later overtake a batch
ticket until it has aged past them. So the estimate replays exactly that, on the group's slots,
from queue_view.lua's snapshot:

- each running lease ends after the mean hold time measured for its person (else its tier:
  lib/pace.lua), less its age;
- each slot that frees goes to the ticket admission would grant then: the best-scored within its
  caps, else a borrower (redoable work may take the reserve but the spare);
- whenever requests within their caps find too few slots free, redoable work is asked back,
  newest first, and waits again from its old place;
- each person keeps sending requests at their measured rate, like those they have waiting or
  running, and those join the line at their own score, held back by their own cap.

A person who borrows idle slots is the exception. They get whatever the others leave, and how much
that is turns on everyone's demand second by second, which a replay at mean rates misses by a
factor of two too often (bench/eta.py: a quarter of the Batch API lines). Their waiting requests are let
through in their own order, so a borrower's wait is read from their drain instead, where one is
measured: their requests ahead of it, and it, at the rate theirs have been let through lately.

Every waiting ticket's estimate comes from one replay, so a process replays a group at most a few
times a second however many requests watch it. Pure Python, no Redis or Django: the clock is the
caller's ``now``.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from fairness.scheduling.live_counts import group_of, pairs, text

# A running lease older than its tier's mean hold time still has this share of one to go: long
# answers are late, not done.
_OVERDUE_SHARE = 0.25
# A redoable lease asked back (or about to be, a chat waiting for it) gives its slot up this soon (s).
_GIVE_BACK_SECONDS = 0.2
# The hold time assumed for a tier never measured yet, when nothing is measured on the group (s).
_UNMEASURED_SECONDS = 1.0
# Arrivals forget with this time constant (s): lib/pace.lua's ARRIVAL_SECONDS.
_ARRIVAL_SECONDS = 30.0
# A person arriving slower than this (per second) is not expected to come in ahead.
_LEAST_RATE = 1 / 600
# lib/revocable.lua's SPARE_EASE: the spare shrinks by one slot this long after a chat last waited.
_SPARE_EASE_SECONDS = 30.0
# How far ahead the replay expects arrivals (s): beyond, whoever waits now has long had a slot.
_ARRIVALS_AHEAD_SECONDS = 600.0
_MOST_PENDING = 32  # a person's expected requests waiting in the replay at once
# A person's drain (their waiting requests let through per second) is read only from a run of
# grants at least this long (s), with this many after its first, the last this recent (s).
_DRAIN_LEAST_GRANTS = 2.0
_DRAIN_CURRENT_SECONDS = 10.0
_DRAIN_LEAST_RUN_SECONDS = 5.0
# How far the replay looks (s) and how many grants it makes at most: beyond, the wait is "longer
# than the horizon" (None).
HORIZON_SECONDS = 3600.0
_MOST_STEPS = 4_000
# ... and how much work it does at most (tickets looked at, summed over its steps): a replay runs
# on the gateway's event loop, so it must stay short (about 20 ms here) whatever the queue holds.
_MOST_WORK = 60_000


@dataclass(frozen=True)
class Running:
    key: str
    pool: str
    granted_at: float
    asked: bool  # asked back: it gives its slot up at once
    revocable: bool  # redoable work on a borrowed slot: asked back when a request within its caps waits


@dataclass(frozen=True)
class Waiting:
    handle: str
    order: int  # arrival number: equal scores go by arrival
    key: str
    pool: str
    stream: str  # "key|pool|group": its stream's floor applies
    enqueued_at: float
    head_start: float
    borrow: bool
    revocable: bool
    delay: float  # fair-share delay (s) added to its score
    deadline: float


@dataclass(frozen=True)
class Arrivals:
    rate: float  # requests per second that queue
    head_start: float
    pool: str


@dataclass(frozen=True)
class QueueView:
    """One group's admission state, as queue_view.lua returns it."""

    group: str
    capacity: int
    hold_until: float
    running: tuple[Running, ...]
    waiting: tuple[Waiting, ...]
    key_in_flight: dict[str, int]
    key_cap: dict[str, int]
    pool_in_flight: dict[str, int]
    pool_cap: dict[str, int]
    floors: dict[str, float]
    service: dict[str, float]  # pool -> mean seconds a lease is held
    arrivals: dict[str, Arrivals]  # key -> how its requests that must wait arrive
    delay: float = 0.0  # the fair-share delay of the newcomer asked about
    reserve: int = 0
    spare: int = 0  # of the reserve, the slots a revocable borrower must leave free
    service_by_key: dict[str, float] = field(default_factory=dict)  # key -> its leases' mean hold
    drain: dict[str, float] = field(default_factory=dict)  # key -> its waiting requests let through per second


@dataclass(frozen=True)
class Newcomer:
    """A request that would arrive now: its person's unit, tier, head start and fair-share delay."""

    key: str
    pool: str
    head_start: float
    cap: int  # its person's concurrency cap in its tier
    delay: float = 0.0
    borrow: bool = False


@dataclass(frozen=True)
class Replay:
    """Seconds from now until each waiting ticket is granted, and how many of those waiting now go
    first (None: not within the horizon)."""

    eta: dict[str, float | None]
    position: dict[str, int]
    newcomer_eta: float | None = None
    measured: bool = True  # False: no tier's pace on the group was measured yet, the pace is a guess
    at: float = 0.0  # the time it replayed from: each estimate is seconds from then


def parse_view(reply: Sequence[Any], group: str, now: float, reserve: int = 0) -> QueueView:
    """queue_view.lua's reply for `group` (its pins included)."""
    head, leases, tickets, keys, pools, floors, service, arrivals, delay, service_by_key, drains = reply
    main = group_of(group)
    running = tuple(
        Running(text(leases[i]), text(leases[i + 1]), float(text(leases[i + 2])),
                asked=text(leases[i + 4]) == "1", revocable=text(leases[i + 3]) == "1")
        for i in range(0, len(leases), 5)
    )
    waiting = tuple(
        Waiting(
            handle=text(tickets[i]), order=int(text(tickets[i + 1]).split(":", 1)[0]), key=text(tickets[i + 2]),
            pool=text(tickets[i + 3]), stream="|".join(text(part) for part in tickets[i + 2:i + 5]),
            enqueued_at=float(text(tickets[i + 5])), head_start=float(text(tickets[i + 6])),
            borrow=text(tickets[i + 7]) == "1", revocable=text(tickets[i + 8]) == "1",
            delay=float(text(tickets[i + 9])), deadline=float(text(tickets[i + 10]) or "inf"),
        )
        for i in range(0, len(tickets), 11)
    )
    key_rows = [(text(keys[i]), int(text(keys[i + 1])), int(text(keys[i + 2]))) for i in range(0, len(keys), 3)]
    pool_rows = [(text(pools[i]), int(text(pools[i + 1])), text(pools[i + 2])) for i in range(0, len(pools), 3)]
    return QueueView(
        group=main, capacity=int(text(head[0])), hold_until=float(text(head[1]) or 0),
        running=running, waiting=waiting,
        key_in_flight={k: n for k, n, _ in key_rows}, key_cap={k: cap for k, _, cap in key_rows},
        pool_in_flight={p: n for p, n, _ in pool_rows}, pool_cap={p: int(cap) for p, _, cap in pool_rows if cap},
        floors={name: float(value) for name, value in pairs(floors).items()},
        service=_by_name(pairs(service), main, float),
        arrivals=_by_name(pairs(arrivals), main, lambda stored: _arrivals(stored, now)),
        delay=float(text(delay)), reserve=reserve, spare=int(text(head[2])),
        service_by_key=_by_name(pairs(service_by_key), main, float),
        drain={key: rate for key, rate in _by_name(pairs(drains), main, lambda stored: _drain(stored, now)).items()
               if rate is not None},
    )


def _by_name(stored: dict[str, str], main: str, read: Any) -> dict[str, Any]:
    """Fields "<pool or key>|group" of this group (or one of its pins) by pool or key."""
    out: dict[str, Any] = {}
    for field_name, value in stored.items():
        name, _, group = field_name.rpartition("|")
        if group_of(group) == main and name not in out:
            out[name] = read(value)
    return out


def _arrivals(stored: str, now: float) -> Arrivals:
    count, at, head_start, pool = stored.split("|", 3)
    decayed = float(count) * math.exp(-max(0.0, now - float(at)) / _ARRIVAL_SECONDS)
    return Arrivals(decayed / _ARRIVAL_SECONDS, float(head_start), pool)


def _drain(stored: str, now: float) -> float | None:
    """Grants per second from the queue, from lib/pace.lua's "count|at|since"; None when there is
    no current run of them to read a rate from (the last grant long ago, the run too short)."""
    count, at, since = (float(part) for part in stored.split("|"))
    run = now - since
    if now - at > _DRAIN_CURRENT_SECONDS or run < _DRAIN_LEAST_RUN_SECONDS:
        return None
    # The grants after the run's first (that one only marks its start), decayed to now, over what
    # a run that long at one grant a second would have counted.
    after_first = count * math.exp(-(now - at) / _ARRIVAL_SECONDS) - math.exp(-run / _ARRIVAL_SECONDS)
    if after_first < _DRAIN_LEAST_GRANTS:
        return None
    return after_first / (_ARRIVAL_SECONDS * -math.expm1(-run / _ARRIVAL_SECONDS))


@dataclass
class _Ticket:
    """A ticket in the replay: waiting now, a newcomer, or one expected to arrive."""

    base: float  # its score before its stream's floor: enqueued_at - head start
    delay: float  # its fair-share delay, added after the floor (as refresh_stream does)
    order: float  # arrival number (an expected arrival's: its arrival time)
    handle: str
    key: str
    pool: str
    stream: str
    head_start: float
    borrow: bool
    revocable: bool


class _Slots:
    """The replay's state: what runs, who is at a cap, which streams have a floor."""

    def __init__(self, view: QueueView) -> None:
        self.view = view
        self.key_in_flight = dict(view.key_in_flight)
        self.key_cap = dict(view.key_cap)
        self.pool_in_flight = dict(view.pool_in_flight)
        self.floors = dict(view.floors)
        measured = list(view.service.values())
        self.fallback = sum(measured) / len(measured) if measured else _UNMEASURED_SECONDS

    def service(self, pool: str, key: str) -> float:
        """The mean hold of a lease of `key` (its own measure, else its tier's)."""
        own = self.view.service_by_key.get(key)
        return own if own is not None else self.view.service.get(pool, self.fallback)

    def open_for(self, ticket: _Ticket) -> bool:
        return self.open_for_key(ticket.key, ticket.pool)

    def open_for_key(self, key: str, pool: str) -> bool:
        """Whether a request of `key` in `pool` is within its person's and its tier's caps."""
        key_open = self.key_in_flight.get(key, 0) < self.key_cap.get(key, 0)
        cap = self.view.pool_cap.get(pool)
        return key_open and (cap is None or self.pool_in_flight.get(pool, 0) < cap)

    def score(self, ticket: _Ticket) -> float:
        floor = self.floors.get(ticket.stream)
        return (ticket.base if floor is None else max(ticket.base, floor)) + ticket.delay

    def take(self, ticket: _Ticket) -> None:
        self.key_in_flight[ticket.key] = self.key_in_flight.get(ticket.key, 0) + 1
        self.pool_in_flight[ticket.pool] = self.pool_in_flight.get(ticket.pool, 0) + 1

    def end(self, key: str, pool: str, at: float, waiting: Iterable[_Ticket]) -> None:
        """A lease ends at `at`. A person at their cap whose tickets wait: they age from now on."""
        at_cap = self.key_in_flight.get(key, 0) >= self.key_cap.get(key, 0)
        self.key_in_flight[key] = self.key_in_flight.get(key, 0) - 1
        if at_cap:
            for ticket in waiting:
                if ticket.key == key:
                    self.floors[ticket.stream] = at - ticket.head_start
        self.pool_in_flight[pool] = self.pool_in_flight.get(pool, 0) - 1


def replay(view: QueueView, now: float, newcomer: Newcomer | None = None) -> Replay:
    """Grant the group's waiting tickets (and `newcomer`, if given) in admission's order as its
    slots free up, at the measured pace, until all of them have a slot or the horizon is reached."""
    slots = _Slots(view)
    start = max(now, view.hold_until)
    ends: list[tuple[float, int, str, str]] = []  # (when, tie, key, pool) of each running lease
    redoable: list[int] = []  # ties of the redoable borrowed leases not asked back yet, oldest first
    for i, lease in enumerate(view.running):
        mean = slots.service(lease.pool, lease.key)
        left = max(mean - (now - lease.granted_at), mean * _OVERDUE_SHARE)
        if lease.asked:
            left = min(left, _GIVE_BACK_SECONDS)
        elif lease.revocable:
            redoable.append(i)
        ends.append((max(start, now + left), i, lease.key, lease.pool))
    heapq.heapify(ends)
    tie = len(ends)
    free = max(0, view.capacity - len(view.running))
    dropped: set[int] = set()  # ends that will not come: the lease was asked back first
    giving_back: dict[int, _Ticket | None] = {}  # the asked leases' ends -> the ticket that waits again
    held_by: dict[int, _Ticket] = {}  # a redoable lease granted in the replay -> its ticket

    waiting = [
        _Ticket(w.enqueued_at - w.head_start, w.delay, w.order, w.handle, w.key, w.pool, w.stream, w.head_start,
                w.borrow, w.revocable)
        for w in view.waiting
    ]
    targets = {w.handle for w in view.waiting}
    if newcomer is not None:
        name = "\x00newcomer"
        waiting.append(_Ticket(now - newcomer.head_start, newcomer.delay, math.inf, name, newcomer.key,
                               newcomer.pool, f"{newcomer.key}|{newcomer.pool}|{view.group}", newcomer.head_start,
                               newcomer.borrow, False))
        targets.add(name)
        slots.key_cap[newcomer.key] = newcomer.cap
    arrivals = _Arrivals(view, now, _habits(view))
    everyone = set(targets)

    eta: dict[str, float | None] = dict.fromkeys(targets)
    position: dict[str, int] = {}
    granted_now = 0  # tickets waiting now granted so far
    t = start
    spare = _Spare(view.spare, view.reserve, t)
    work = 0  # tickets looked at: the replay's cost, bounded (beyond, the wait is unknown: None)
    for _ in range(_MOST_STEPS):
        work += len(waiting)
        if work > _MOST_WORK:
            break
        for came in arrivals.take(t, waiting):
            if not came.revocable and redoable and free == 0 and slots.open_for(came):
                spare.raise_at(t)  # a chat had to wait while redoable work borrowed
        while free > 0 and waiting:
            chosen, borrowed = _next(waiting, slots, free, view.reserve, spare.at(t))
            if chosen is None:
                break
            waiting.remove(chosen)
            free -= 1
            slots.take(chosen)
            heapq.heappush(ends, (t + slots.service(chosen.pool, chosen.key), tie, chosen.key, chosen.pool))
            if borrowed and chosen.revocable:
                redoable.append(tie)
                held_by[tie] = chosen
            tie += 1
            if chosen.handle in targets:
                eta[chosen.handle] = t - now
                targets.discard(chosen.handle)
                if chosen.handle not in position:
                    position[chosen.handle] = granted_now
                    granted_now += 1
        # Chats within their caps find too few slots free: redoable work is asked back, newest first.
        within = sum(1 for w in waiting if not w.revocable and slots.open_for(w))
        while within and redoable and free + len(giving_back) < spare.at(t) + within:
            asked = redoable.pop()
            dropped.add(asked)
            ticket = held_by.pop(asked, None)
            giving_back[tie] = ticket
            heapq.heappush(ends, (t + _GIVE_BACK_SECONDS, tie, *_holder(ends, asked)))
            tie += 1
        # Done once every one has a slot it keeps: redoable work may yet be asked back.
        if not targets and not any(held is not None and held.handle in everyone
                                   for held in (*held_by.values(), *giving_back.values())):
            break
        next_end = ends[0][0] if ends else math.inf
        next_arrival = arrivals.next_at()
        t = min(next_end, next_arrival)
        if t - now > HORIZON_SECONDS:
            break
        if next_end <= next_arrival:
            _, ended, key, pool = heapq.heappop(ends)
            if ended in dropped:
                continue
            if ended in redoable:
                redoable.remove(ended)
            held_by.pop(ended, None)
            slots.end(key, pool, t, waiting)
            free += 1
            if ended in giving_back and (again := giving_back.pop(ended)) is not None:
                waiting.append(again)  # it runs again later, from its old place in line
                if again.handle in everyone:
                    targets.add(again.handle)
            else:
                giving_back.pop(ended, None)
    for handle in targets:  # not granted within the horizon: behind everyone granted
        position.setdefault(handle, granted_now)
        eta[handle] = None
    _borrowers_from_drain(view, eta, newcomer)
    newcomer_eta = eta.pop("\x00newcomer", None)
    position.pop("\x00newcomer", None)
    return Replay(eta, position, newcomer_eta, measured=bool(view.service), at=now)


def _borrowers_from_drain(view: QueueView, eta: dict[str, float | None], newcomer: Newcomer | None) -> None:
    """A borrower's wait, from their drain where one is measured: their requests ahead of it, and
    it, let through at the rate theirs have been lately."""
    ahead: dict[str, int] = {}
    for w in sorted(view.waiting, key=lambda w: w.order):
        n = ahead[w.key] = ahead.get(w.key, 0) + 1
        rate = view.drain.get(w.key)
        if w.borrow and rate and w.handle in eta:
            eta[w.handle] = _within_horizon(n / rate)
    if newcomer is not None and newcomer.borrow and (rate := view.drain.get(newcomer.key)):
        eta["\x00newcomer"] = _within_horizon((ahead.get(newcomer.key, 0) + 1) / rate)


def _within_horizon(seconds: float) -> float | None:
    return seconds if seconds <= HORIZON_SECONDS else None


class _Spare:
    """The slots redoable work leaves free, as lib/revocable.lua keeps it: one more each time a
    chat has to wait for a slot while redoable work borrows, at most the reserve, one less every
    _SPARE_EASE_SECONDS no chat had to."""

    def __init__(self, level: int, reserve: int, now: float) -> None:
        self.level, self.reserve, self.raised_at = level, reserve, now

    def at(self, t: float) -> int:
        if self.level <= 0:
            return 0
        return max(1, self.level - math.floor((t - self.raised_at) / _SPARE_EASE_SECONDS))

    def raise_at(self, t: float) -> None:
        if self.reserve > 0:
            self.level, self.raised_at = min(self.reserve, max(self.at(t), 0) + 1), t


def _holder(ends: list[tuple[float, int, str, str]], tie: int) -> tuple[str, str]:
    """The (key, pool) of the lease whose end is `tie`."""
    return next((key, pool) for _, at, key, pool in ends if at == tie)


def _next(waiting: list[_Ticket], slots: _Slots, free: int, reserve: int, spare: int) -> tuple[_Ticket | None, bool]:
    """The ticket admission grants next, and whether it borrows: the best-scored one within its
    caps, else the best-scored one that may borrow (beyond the reserve; redoable work, beyond the
    spare)."""
    best: _Ticket | None = None
    best_score = math.inf
    for ticket in waiting:
        if slots.open_for(ticket):
            score = slots.score(ticket)
            if score < best_score or (score == best_score and best is not None and ticket.order < best.order):
                best, best_score = ticket, score
    if best is not None or free - 1 < min(reserve, spare):
        return best, False
    borrowers = [t for t in waiting if t.borrow and (free - 1 >= reserve or (t.revocable and free - 1 >= spare))]
    return min(borrowers, key=lambda t: (slots.score(t), t.order), default=None), True


@dataclass(frozen=True)
class _Habit:
    """What a person's next requests will be like, judged by those they have waiting or running."""

    delay: float = 0.0
    borrow: bool = False
    revocable: bool = False


def _habits(view: QueueView) -> dict[str, _Habit]:
    habits: dict[str, _Habit] = {}
    for w in view.waiting:
        habits[w.key] = _Habit(max(w.delay, 0.0), w.borrow, w.revocable)
    for lease in view.running:  # redoable work on a borrowed slot: its person's work borrows so
        if lease.revocable and lease.key not in habits:
            habits[lease.key] = _Habit(0.0, True, True)
    return habits


class _Arrivals:
    """The requests each person is expected to send, evenly at their measured rate, made only as
    the replay's clock reaches them (a busy person's rate times a long replay would be far too
    many to make up front). Each is its person's: their cap holds it back as it would them, and
    at most _MOST_PENDING of one person's wait in the replay at once (more could only queue
    behind them)."""

    def __init__(self, view: QueueView, now: float, habits: dict[str, _Habit]) -> None:
        self._view, self._now, self._habits = view, now, habits
        self._sent: dict[str, int] = {}
        self._due: list[tuple[float, str]] = [
            (now + 1 / coming.rate, key) for key, coming in view.arrivals.items() if coming.rate >= _LEAST_RATE
        ]
        heapq.heapify(self._due)

    def next_at(self) -> float:
        return self._due[0][0] if self._due else math.inf

    def take(self, until: float, waiting: list[_Ticket]) -> list[_Ticket]:
        """The arrivals due by `until`, each added to `waiting` unless its person has too many there."""
        came = []
        while self._due and self._due[0][0] <= until:
            at, key = heapq.heappop(self._due)
            coming, habit = self._view.arrivals[key], self._habits.get(key, _Habit())
            n = self._sent[key] = self._sent.get(key, 0) + 1
            if at - self._now < _ARRIVALS_AHEAD_SECONDS:
                heapq.heappush(self._due, (at + 1 / coming.rate, key))
            if sum(1 for w in waiting if w.key == key) >= _MOST_PENDING:
                continue
            ticket = _Ticket(at - coming.head_start, habit.delay, at, f"\x00arrival {key} {n}", key, coming.pool,
                             f"{key}|{coming.pool}|{self._view.group}", coming.head_start, habit.borrow,
                             habit.revocable)
            waiting.append(ticket)
            came.append(ticket)
        return came
