"""Rendezvous order: adding or removing a replica moves only the conversations it takes or held."""

from __future__ import annotations

from fairness.scheduling.routing import preference

KEYS = [f"conversation-{i}" for i in range(10_000)]


def owners(replicas, keys=KEYS) -> dict[str, str]:
    return {key: preference(replicas, key)[0].name for key in keys}


def test_removing_one_of_four_moves_only_the_conversations_it_held(make_replicas):
    four = make_replicas(4)
    before = owners(four)
    after = owners(four[:3])  # r3 goes away

    moved = {key for key in KEYS if before[key] != after[key]}
    assert moved == {key for key in KEYS if before[key] == "r3"}
    assert 2200 <= len(moved) <= 2800  # ≈ 1/4 of 10,000


def test_adding_the_replica_back_restores_the_original_mapping(make_replicas):
    four = make_replicas(4)
    before = owners(four)
    owners(four[:3])
    assert owners(four[:3] + [four[3]]) == before


def test_adding_a_fifth_takes_about_a_fifth_and_nothing_moves_elsewhere(make_replicas):
    five = make_replicas(5)
    before = owners(five[:4])
    after = owners(five)

    moved = [key for key in KEYS if before[key] != after[key]]
    assert all(after[key] == "r4" for key in moved)
    assert 1700 <= len(moved) <= 2300  # ≈ 1/5 of 10,000


def test_the_order_ignores_how_the_replicas_are_listed(make_replicas):
    four = make_replicas(4)
    for key in KEYS[:200]:
        assert preference(four, key) == preference(list(reversed(four)), key)


def test_the_order_is_a_full_ranking(make_replicas):
    four = make_replicas(4)
    order = preference(four, "some conversation")
    assert sorted(r.name for r in order) == ["r0", "r1", "r2", "r3"]
