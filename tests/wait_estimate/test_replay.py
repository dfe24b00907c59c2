"""The wait estimate's replay, on snapshots built by hand: admission's order, its caps, the pace
of the slots and the arrivals that overtake. (tests/admission/test_wait_estimate.py checks the
snapshot Redis gives and the estimate against real grants.)"""

from __future__ import annotations

import math
from typing import Any

import pytest

from fairness.scheduling.wait_estimate import Arrivals, Newcomer, QueueView, Running, Waiting, _drain, replay

NOW = 1_000.0
GROUP = "m"


def ticket(handle: str, key: str, pool: str, enqueued_at: float, head_start: float, order: int, **more: Any) -> Waiting:
    return Waiting(handle=handle, order=order, key=key, pool=pool, stream=f"{key}|{pool}|{GROUP}",
                   enqueued_at=enqueued_at, head_start=head_start, borrow=more.get("borrow", False),
                   revocable=more.get("revocable", False), delay=more.get("delay", 0.0), deadline=NOW + 600)


def view(running: list[Running], waiting: list[Waiting], *, capacity: int = 1, caps: dict[str, int] | None = None,
         service: dict[str, float] | None = None, arrivals: dict[str, Arrivals] | None = None,
         **more: Any) -> QueueView:
    caps = caps or {}
    keys = {r.key for r in running} | {w.key for w in waiting} | set(caps) | set(arrivals or {})
    in_flight = {k: sum(r.key == k for r in running) for k in keys}
    pools = {r.pool for r in running} | {w.pool for w in waiting}
    return QueueView(
        group=GROUP, capacity=capacity, hold_until=0.0, running=tuple(running), waiting=tuple(waiting),
        key_in_flight=in_flight, key_cap={k: caps.get(k, 9) for k in keys},
        pool_in_flight={p: sum(r.pool == p for r in running) for p in pools}, pool_cap=more.get("pool_cap", {}),
        floors=more.get("floors", {}), service=service or {"chat": 10.0, "batch": 10.0},
        arrivals=arrivals or {}, delay=0.0, reserve=more.get("reserve", 0), spare=more.get("spare", 0),
        service_by_key=more.get("service_by_key", {}), drain=more.get("drain", {}),
    )


def lease(key: str, pool: str, age: float, **more: Any) -> Running:
    return Running(key, pool, NOW - age, more.get("asked", False), more.get("revocable", False))


def test_one_slot_grants_in_score_order_not_arrival_order() -> None:
    # carol (batch, no head start) queued 20 s before alice (chat, 600 s head start).
    result = replay(view([lease("zed", "chat", 4.0)], [
        ticket("carol", "carol", "batch", NOW - 30, 0, 1),
        ticket("alice", "alice", "chat", NOW - 10, 600, 2),
    ]), NOW)
    assert result.position == {"alice": 0, "carol": 1}
    # zed's lease has 6 s left of its 10; alice then holds the slot 10 s (the chat tier's pace).
    assert result.eta["alice"] == pytest.approx(6.0)
    assert result.eta["carol"] == pytest.approx(16.0)


def test_each_slot_frees_at_its_own_tiers_pace() -> None:
    result = replay(view([lease("a", "chat", 1.0), lease("b", "batch", 1.0)], [
        ticket("x", "x", "batch", NOW - 5, 0, 1),
        ticket("y", "y", "batch", NOW - 4, 0, 2),
    ], capacity=2, service={"chat": 3.0, "batch": 40.0}), NOW)
    # The chat's slot frees first (2 s), and x holds it for a batch's 40 s; y takes the batch
    # lease's slot at 39 s.
    assert result.eta == {"x": pytest.approx(2.0), "y": pytest.approx(39.0)}


def test_a_ticket_behind_its_own_cap_waits_for_its_own_lease_and_lets_others_pass() -> None:
    # carol holds her cap (1) with a lease ending in 8 s; the free slot goes to dave behind her.
    result = replay(view([lease("carol", "batch", 2.0)], [
        ticket("carol-2", "carol", "batch", NOW - 20, 0, 1),
        ticket("dave", "dave", "batch", NOW - 1, 0, 2),
    ], capacity=2, caps={"carol": 1}), NOW)
    assert result.eta["dave"] == pytest.approx(0.0)
    assert result.position["dave"] == 0
    assert result.eta["carol-2"] == pytest.approx(8.0)


def test_a_capped_person_ages_only_from_the_moment_their_cap_opens() -> None:
    # carol's ticket is older than bob's, but waited behind her own cap: when her lease ends she
    # counts from then, so bob (same tier, queued 5 s ago) goes first on the next slot.
    result = replay(view([lease("carol", "batch", 7.0), lease("zed", "batch", 5.0)], [
        ticket("carol-2", "carol", "batch", NOW - 60, 0, 1),
        ticket("bob", "bob", "batch", NOW - 5, 0, 2),
    ], capacity=2, caps={"carol": 1}), NOW)
    # carol's lease ends at 3 s, bob takes that slot; carol's ticket gets zed's at 5 s.
    assert result.eta == {"bob": pytest.approx(3.0), "carol-2": pytest.approx(5.0)}


def test_a_lease_past_its_tiers_mean_still_has_some_way_to_go() -> None:
    result = replay(view([lease("zed", "chat", 30.0)], [ticket("a", "a", "chat", NOW, 0, 1)]), NOW)
    assert result.eta["a"] == pytest.approx(2.5)  # a quarter of the chat tier's 10 s


def test_chats_arriving_later_overtake_a_batch_ticket_until_it_has_aged_past_them() -> None:
    # The slot frees in 10 s (a batch lease); carol (batch) waits for it.
    def snapshot(head_start: float | None) -> QueueView:
        coming = {} if head_start is None else {"chatter": Arrivals(0.5, head_start, "chat")}
        return view([lease("zed", "batch", 0.0)], [ticket("carol", "carol", "batch", NOW, 0, 1)],
                    service={"chat": 1.0, "batch": 10.0}, arrivals=coming)

    assert replay(snapshot(None), NOW).eta["carol"] == pytest.approx(10.0)
    # A chat every 2 s with a 5 s head start: the two arriving within 5 s of carol go first, one
    # second each; those after stand behind her.
    flooded = replay(snapshot(5.0), NOW)
    assert flooded.eta["carol"] == pytest.approx(12.0)
    assert flooded.position["carol"] == 0  # of those waiting now, none is ahead of her
    # The same rate with no head start over carol never overtakes her.
    assert replay(snapshot(0.0), NOW).eta["carol"] == pytest.approx(10.0)


def test_fair_share_delay_moves_a_ticket_back() -> None:
    waiting = [ticket("heavy", "h", "chat", NOW - 10, 0, 1, delay=30.0), ticket("light", "l", "chat", NOW - 5, 0, 2)]
    result = replay(view([lease("zed", "chat", 0.0)], waiting), NOW)
    assert result.position == {"light": 0, "heavy": 1}


def test_redoable_work_gives_its_slot_back_when_a_chat_waits() -> None:
    result = replay(view([lease("runner", "batch", 1.0, revocable=True)],
                         [ticket("alice", "alice", "chat", NOW, 600, 1)], service={"batch": 100.0, "chat": 2.0}), NOW)
    assert result.eta["alice"] is not None and result.eta["alice"] < 1.0


def test_a_newcomer_is_estimated_where_it_would_stand() -> None:
    snapshot = view([lease("zed", "chat", 5.0)], [ticket("carol", "carol", "batch", NOW - 30, 0, 1)])
    as_chat = replay(snapshot, NOW, Newcomer("alice", "chat", 600.0, cap=2))
    as_batch = replay(snapshot, NOW, Newcomer("dave", "batch", 0.0, cap=2))
    assert as_chat.newcomer_eta == pytest.approx(5.0)  # ahead of carol
    assert as_batch.newcomer_eta == pytest.approx(15.0)  # behind her
    assert "\x00newcomer" not in as_chat.eta and as_chat.position == {"carol": 1}  # the chat went first


def test_a_newcomer_at_its_own_cap_waits_for_its_own_lease_beside_a_free_slot() -> None:
    snapshot = view([lease("zed", "chat", 5.0)], [], capacity=2)
    assert replay(snapshot, NOW, Newcomer("alice", "chat", 600.0, cap=1)).newcomer_eta == pytest.approx(0.0)
    assert replay(snapshot, NOW, Newcomer("zed", "chat", 600.0, cap=1)).newcomer_eta == pytest.approx(5.0)


def test_nothing_to_free_the_slots_is_beyond_the_horizon() -> None:
    result = replay(view([], [ticket("a", "a", "chat", NOW, 0, 1)], capacity=0), NOW)
    assert result.eta["a"] is None and result.position["a"] == 0


def test_a_pool_cap_holds_its_tickets_back() -> None:
    result = replay(view([lease("c", "batch", 0.0)], [
        ticket("d", "d", "batch", NOW - 9, 0, 1), ticket("e", "e", "chat", NOW, 0, 2),
    ], capacity=2, pool_cap={"batch": 1}), NOW)
    assert result.position == {"e": 0, "d": 1}
    assert result.eta["d"] == pytest.approx(10.0)


def test_each_persons_own_pace_beats_their_tiers() -> None:
    # One tier, two people: frank's requests hold a slot 8 s, the tier's mean is 2 s.
    snapshot = view([lease("frank", "chat", 0.0)], [ticket("a", "a", "chat", NOW, 0, 1)],
                    service={"chat": 2.0}, service_by_key={"frank": 8.0})
    assert replay(snapshot, NOW).eta["a"] == pytest.approx(8.0)


def test_a_persons_expected_arrivals_are_held_back_by_their_cap() -> None:
    # frank (cap 1, running) sends a request every second with a big head start: uncapped, they
    # would all overtake carol; held to his cap, only one can run at a time, beside her slot.
    snapshot = view([lease("frank", "chat", 0.0), lease("zed", "batch", 5.0)],
                    [ticket("carol", "carol", "batch", NOW - 1, 0, 1)], capacity=2, caps={"frank": 1},
                    service={"chat": 4.0, "batch": 10.0}, arrivals={"frank": Arrivals(1.0, 600.0, "chat")})
    assert replay(snapshot, NOW).eta["carol"] == pytest.approx(5.0)  # zed's slot, frank's stays his


def test_redoable_work_may_take_the_reserve_but_the_spare() -> None:
    waiting = [ticket("flood", "carol", "batch", NOW - 50, 0, 1, borrow=True),
               ticket("line", "grace", "batch", NOW - 1, 0, 2, borrow=True, revocable=True)]
    # Three slots free, a reserve of 3 and a spare of 1: only the redoable line may borrow now.
    result = replay(view([lease("zed", "batch", 0.0)], waiting, capacity=4, caps={"carol": 0, "grace": 0},
                         reserve=3, spare=1), NOW)
    assert result.eta["line"] == pytest.approx(0.0)
    assert result.eta["flood"] is None or result.eta["flood"] > 0.0


def test_redoable_work_granted_in_the_replay_is_asked_back_for_the_chats_that_come_after() -> None:
    def snapshot(chats: float) -> QueueView:
        return view([lease("zed", "chat", 0.0)], [ticket("line", "grace", "batch", NOW, 0, 1, borrow=True,
                                                         revocable=True)],
                    capacity=3, caps={"grace": 0}, reserve=3, spare=1, service={"chat": 10.0, "batch": 10.0},
                    arrivals={} if not chats else {"chatter": Arrivals(chats, 600.0, "chat")})

    assert replay(snapshot(0.0), NOW).eta["line"] == pytest.approx(0.0)  # it borrows a spare slot at once
    # A chat a second: the second finds no slot free, so the line is asked back and waits again.
    later = replay(snapshot(1.0), NOW).eta["line"]
    assert later is None or later > 2.0


def test_a_borrowers_wait_is_read_from_their_drain() -> None:
    # grace borrows idle slots (her cap is 0); hers have been let through two a second lately.
    waiting = [ticket("g1", "grace", "batch", NOW - 3, 0, 1, borrow=True, revocable=True),
               ticket("c1", "carol", "batch", NOW - 2, 0, 2),
               ticket("g2", "grace", "batch", NOW - 1, 0, 3, borrow=True, revocable=True),
               ticket("g3", "grace", "batch", NOW, 0, 4, borrow=True, revocable=True)]
    snapshot = view([lease("zed", "batch", 5.0)], waiting, caps={"grace": 0},
                    drain={"grace": 2.0, "carol": 100.0})
    result = replay(snapshot, NOW)
    # Hers ahead of each, and it, at two a second: whatever the replay of the one slot said.
    assert [result.eta[h] for h in ("g1", "g2", "g3")] == [pytest.approx(0.5), pytest.approx(1.0), pytest.approx(1.5)]
    # carol does not borrow: she is replayed (zed's lease has 5 s of its 10 left), her drain unread.
    assert result.eta["c1"] == pytest.approx(5.0)
    assert result.position == {"c1": 0, "g1": 1, "g2": 2, "g3": 3}  # the order is the replay's
    newcomer = replay(snapshot, NOW, Newcomer("grace", "batch", 0.0, cap=0, borrow=True))
    assert newcomer.newcomer_eta == pytest.approx(2.0)  # behind her three
    # Without a drain measured, her wait is the replay's: after carol's 10 s, one at a time.
    replayed = replay(view([lease("zed", "batch", 5.0)], waiting, caps={"grace": 0}), NOW)
    assert replayed.eta["g1"] == pytest.approx(15.0)


def test_a_drain_is_read_only_from_a_current_run_of_grants() -> None:
    # lib/pace.lua's "count|at|since": one grant a second for 20 s, the last just now.
    steady = sum(math.exp(-i / 30) for i in range(21))
    assert _drain(f"{steady}|{NOW}|{NOW - 20}", NOW) == pytest.approx(1.0, rel=0.02)
    assert _drain(f"{steady}|{NOW - 11}|{NOW - 31}", NOW) is None  # its last grant 11 s ago: not current
    assert _drain(f"4|{NOW}|{NOW - 3}", NOW) is None  # a run of 3 s: too short to read a rate from
    assert _drain(f"2|{NOW}|{NOW - 60}", NOW) is None  # one grant after the first: too few
