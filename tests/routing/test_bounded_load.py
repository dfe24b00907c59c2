"""Bounded load: affinity yields to balance only past ceil((1 + ε) · average), and full replicas
are skipped."""

from __future__ import annotations

import dataclasses
import math
import random
from collections import Counter

from fairness.scheduling.routing import choose, preference
from tests.support.replicas import replica


def bound(load: Counter, replicas, epsilon: float) -> int:
    total = sum(load[r.name] for r in replicas)
    return math.ceil((1 + epsilon) * (total + 1) / len(replicas))


def test_the_conversation_s_favourite_takes_it_when_load_is_even(make_replicas):
    replicas = make_replicas(4)
    load = {r.name: 2 for r in replicas}
    assert choose(replicas, "k", load)[0] == preference(replicas, "k")[0]


def test_a_hot_key_group_never_pushes_a_replica_past_the_bound(make_replicas):
    replicas = make_replicas(4, max_num_seqs=10_000)
    # Five conversations that all favour r0, taking 70% of the arrivals.
    hot = [k for k in (f"hot-{i}" for i in range(200)) if preference(replicas, k)[0].name == "r0"]
    hot = hot[:5]
    rng = random.Random(7)
    load: Counter = Counter()
    running: list[str] = []
    for step in range(5000):
        if running and rng.random() < 0.45:
            load[running.pop(rng.randrange(len(running)))] -= 1
            continue
        key = rng.choice(hot) if rng.random() < 0.7 else f"cold-{step}"
        limit = bound(load, replicas, 0.25)
        chosen = choose(replicas, key, load, epsilon=0.25, floor=0)[0]
        assert load[chosen.name] + 1 <= limit
        # Affinity is kept whenever the bound allows it: the first replica in the key's order
        # that stays within the bound is the one chosen.
        assert chosen == next(r for r in preference(replicas, key) if load[r.name] + 1 <= limit)
        load[chosen.name] += 1
        running.append(chosen.name)
    assert max(load.values()) <= bound(load, replicas, 0.25)


def test_a_larger_epsilon_keeps_more_affinity(make_replicas):
    replicas = make_replicas(4, max_num_seqs=10_000)
    key = "hot"
    favourite = preference(replicas, key)[0].name

    def kept(epsilon: float) -> int:
        load: Counter = Counter()
        for _ in range(400):
            load[choose(replicas, key, load, epsilon, floor=0)[0].name] += 1
        return load[favourite]

    assert kept(0.1) < kept(0.5) < kept(2.0)


def test_a_full_replica_is_skipped_for_the_next_in_order(make_replicas):
    replicas = make_replicas(4, max_num_seqs=2)
    order = preference(replicas, "k")
    load = {order[0].name: 2}  # full, though well within the load bound of a bigger fleet
    chosen = choose(replicas, "k", load, epsilon=10.0)
    assert chosen[0] == order[1]
    assert chosen[-1] == order[0]  # still tried last: a slot may have freed by then


def test_when_all_are_full_the_least_loaded_comes_first(make_replicas):
    replicas = make_replicas(3, max_num_seqs=4)
    big = dataclasses.replace(replicas[0], name="big", max_num_seqs=16)
    candidates = replicas + [big]
    load = {"r0": 4, "r1": 5, "r2": 4, "big": 16}
    order = choose(candidates, "k", load)
    # r0 and r2 at 100%, r1 at 125%, big at 100%: ties keep the key's own order.
    assert order[-1].name == "r1"
    ties = [r.name for r in preference(candidates, "k") if r.name != "r1"]
    assert [r.name for r in order[:3]] == ties


def test_the_retry_target_is_the_next_replica_within_the_bound(make_replicas):
    replicas = make_replicas(4)
    order = preference(replicas, "k")
    load = {order[1].name: 3}  # total 3: bound ceil(1.25 · 4 / 4) = 2, so order[1] is over
    assert [r.name for r in choose(replicas, "k", load, floor=0)] == [
        order[0].name,
        order[2].name,
        order[3].name,
        order[1].name,
    ]


def test_a_request_without_a_key_goes_to_the_least_loaded(make_replicas):
    replicas = make_replicas(3, max_num_seqs=8)
    assert choose(replicas, None, {"r0": 3, "r1": 1, "r2": 2})[0].name == "r1"


def test_no_candidates_means_nothing_to_try():
    assert choose([], "k", {}) == []


def test_lightly_loaded_replicas_keep_their_conversations_despite_the_bound():
    replicas = [replica(f"r{i}", max_num_seqs=32) for i in range(3)]
    favourite = preference(replicas, "k")[0]
    # 6 in flight on the favourite, 11 in all: the bound alone (ceil(1.25 * 12 / 3) = 5) would
    # move the conversation, but 6 of 32 slots is far below the floor of three eighths.
    load = {r.name: 0 for r in replicas} | {favourite.name: 6}
    load[next(r.name for r in replicas if r is not favourite)] = 5
    assert choose(replicas, "k", load)[0] == favourite
    assert choose(replicas, "k", load, floor=0)[0] != favourite
    # Past the floor the bound applies again.
    load[favourite.name] = 12
    assert choose(replicas, "k", load)[0] != favourite
