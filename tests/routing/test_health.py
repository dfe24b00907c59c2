"""Health: unknown is healthy, passive marks last one cooldown, probes are shared and recover,
and no probe clears what failures of several callers marked."""

from __future__ import annotations

from fairness.gateway import health_probes
from fairness.scheduling import health
from fairness.store import keyspace
from tests.support.polling import async_wait_for
from tests.support.processes import free_port
from tests.support.replicas import replica

R0, R1 = replica("r0"), replica("r1")
NAMES = [R0, R1]


async def test_replicas_never_probed_count_as_healthy(aredis):
    assert await health.healthy(aredis, NAMES) == {"r0", "r1"}


async def test_a_passive_mark_lasts_one_cooldown(aredis):
    await health.mark_down(aredis, R0, cooldown=1.0)
    assert await health.healthy(aredis, NAMES) == {"r1"}

    async def back() -> bool:
        return await health.healthy(aredis, NAMES) == {"r0", "r1"}

    await async_wait_for(back, timeout=5, what="the cooldown to end")


async def test_a_probe_answered_503_marks_the_replica_down(aredis, health_server):
    health_server.status = 503
    target = replica("r0", base_url=health_server.url)
    assert await health_probes.probe_all(aredis, [target]) == {"r0": False}
    assert await health.healthy(aredis, [target, R1]) == {"r1"}
    assert health_server.probes == 1


async def test_an_unreachable_replica_is_marked_down(aredis, health_server):
    closed = replica("r1", base_url=f"http://127.0.0.1:{free_port()}")
    up = replica("r0", base_url=health_server.url)
    assert await health_probes.probe_all(aredis, [up, closed]) == {"r0": True, "r1": False}
    assert await health.healthy(aredis, [up, closed]) == {"r0"}


async def test_a_successful_probe_clears_a_down_mark(aredis, health_server):
    target = replica("r0", base_url=health_server.url)
    await health.mark_down(aredis, target, cooldown=60)
    assert "r0" not in await health.healthy(aredis, [target])

    assert await health_probes.probe_all(aredis, [target]) == {"r0": True}
    assert "r0" in await health.healthy(aredis, [target])


async def test_a_successful_probe_leaves_a_failing_mark_to_its_cooldown(aredis, health_server):
    """An engine can answer /health while every request stalls: what several callers saw wins."""
    target = replica("r0", base_url=health_server.url)
    for caller in ("1", "2", "3"):
        await health.record_failure(aredis, target, caller, cooldown=60)
    for status in (200, 503):  # neither a good nor a bad probe shortens the mark
        health_server.status = status
        await health_probes.probe_all(aredis, [target], ttl=0.3)
        assert "r0" not in await health.healthy(aredis, [target])
    assert await aredis.pttl(health.key(target)) > 50_000

    await aredis.pexpire(health.key(target), 1)  # its cooldown over: probes speak for it again
    health_server.status = 200

    async def routed_again() -> bool:
        await health_probes.probe_all(aredis, [target])
        return await aredis.get(health.key(target)) == health.UP

    await async_wait_for(routed_again, timeout=5, what="the probe to put the replica back")


async def test_a_replica_that_recovers_is_healthy_after_the_next_probe(aredis, health_server):
    target = replica("r0", base_url=health_server.url)
    health_server.status = 503
    await health_probes.probe_all(aredis, [target])
    assert "r0" not in await health.healthy(aredis, [target])

    health_server.status = 200
    await health_probes.probe_all(aredis, [target])
    assert "r0" in await health.healthy(aredis, [target])


async def test_a_verdict_expires_when_probing_stops(aredis, health_server):
    health_server.status = 503
    target = replica("r0", base_url=health_server.url)
    await health_probes.probe_all(aredis, [target], ttl=0.3)

    async def unknown_again() -> bool:
        return "r0" in await health.healthy(aredis, [target])

    await async_wait_for(unknown_again, timeout=5, what="the probe verdict to expire")


async def test_only_one_process_probes_per_interval(aredis, health_server):
    target = replica("r0", base_url=health_server.url)
    assert await health_probes.probe_if_due(aredis, [target], interval=60) == {"r0": True}
    assert await health_probes.probe_if_due(aredis, [target], interval=60) is None
    assert health_server.probes == 1


async def test_one_callers_failures_never_mark_a_replica_down(aredis):
    for _ in range(10):
        assert not await health.record_failure(aredis, R0, caller="7")
    assert await health.healthy(aredis, NAMES) == {"r0", "r1"}


async def test_failures_of_three_callers_mark_the_replica_down_and_start_a_new_count(aredis):
    assert not await health.record_failure(aredis, R0, "1")
    assert not await health.record_failure(aredis, R0, "2")
    assert not await health.record_failure(aredis, R1, "3")  # another replica's failures are its own
    assert not await health.record_failure(aredis, R0, "2")  # a caller counts once
    assert await health.record_failure(aredis, R0, "3", cooldown=60)
    assert await health.healthy(aredis, NAMES) == {"r1"}
    assert not await aredis.exists(keyspace.health_failures(R0.name, R0.base_url))


async def test_only_failures_within_the_window_count(aredis):
    failures = keyspace.health_failures(R0.name, R0.base_url)
    await health.record_failure(aredis, R0, "1", window=1.0)
    first = await aredis.zscore(failures, "1")

    def redis_clock_past(ms: float):
        async def past() -> bool:
            seconds, micros = await aredis.time()
            return seconds * 1000 + micros // 1000 > ms

        return past

    await async_wait_for(redis_clock_past(first + 500), timeout=5, what="half a window")
    await health.record_failure(aredis, R0, "2", window=1.0)  # keeps the count alive
    await async_wait_for(redis_clock_past(first + 1000), timeout=5, what="the first failure to age out")
    assert not await health.record_failure(aredis, R0, "3", window=1.0)
    assert await aredis.zrange(failures, 0, -1) == [b"2", b"3"]
    assert 0 < await aredis.pttl(failures) <= 1000  # gone a window after the last failure
