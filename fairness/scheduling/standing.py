"""Where one person's waiting requests stand in a group's queue: each one's place among those
waiting now and its wait estimate (wait_estimate.py), from one replay of the group. What GET
/v1/queue and the person's own page show; nobody else's requests are named."""

from __future__ import annotations

from dataclasses import dataclass

from fairness.scheduling.units import parse_unit
from fairness.scheduling.wait_estimate import QueueView, replay


@dataclass(frozen=True)
class Queued:
    request_id: str  # its ticket's handle: the request's id
    tier: str
    position: int  # how many of those waiting now go first
    waited: float  # seconds so far
    eta: float | None  # seconds still to wait (None: beyond the estimator's horizon)
    # What its rank is made of (admission's score, lua/lib/queue.lua: arrival - head start, raised
    # to its stream's floor, plus the fair-share delay), in seconds of rank, more going first:
    aged: float = 0.0  # waiting that counts: time behind its own person's cap does not
    head_start: float = 0.0
    fair_share: float = 0.0  # minus the fair-share delay

    @property
    def rank(self) -> float:
        return self.aged + self.head_start + self.fair_share


@dataclass(frozen=True)
class Standing:
    waiting: int  # requests waiting in the group, everyone's
    mine: tuple[Queued, ...]  # the person's, first first


def standing_of(view: QueueView, now: float, person_id: int) -> Standing:
    result = replay(view, now)
    mine = []
    for ticket in view.waiting:
        person = parse_unit(ticket.key)
        if person is not None and person[0] == person_id:
            base = ticket.enqueued_at - ticket.head_start
            floor = view.floors.get(ticket.stream)
            aged = now - ticket.head_start - (base if floor is None else max(base, floor))
            mine.append(Queued(ticket.handle, person[1], result.position[ticket.handle],
                               max(0.0, now - ticket.enqueued_at), result.eta[ticket.handle],
                               aged=aged, head_start=ticket.head_start, fair_share=-ticket.delay))
    return Standing(len(view.waiting), tuple(sorted(mine, key=lambda q: q.position)))
