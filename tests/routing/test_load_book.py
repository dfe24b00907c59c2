"""Shared in-flight counts: summed over gateway processes, gone when a process stops refreshing."""

from __future__ import annotations

from fairness.scheduling.routing import LoadBook
from fairness.store.keyspace import LOAD_PROCESSES as PROCS
from tests.polling import async_wait_for

NAMES = ["r0", "r1", "r2"]


async def settle(*books: LoadBook) -> None:
    for book in books:
        await book.settled()


async def test_counts_add_up_across_two_processes(aredis):
    first, second = LoadBook(aredis), LoadBook(aredis)
    try:
        first.add("r0")
        first.add("r0")
        second.add("r0")
        second.add("r1")
        await settle(first, second)
        expected = {"r0": 3, "r1": 1, "r2": 0}
        assert await first.snapshot(NAMES) == expected
        assert await second.snapshot(NAMES) == expected

        first.done("r0")
        second.done("r1")
        await settle(first, second)
        assert await first.snapshot(NAMES) == {"r0": 2, "r1": 0, "r2": 0}
    finally:
        await first.close()
        await second.close()


async def test_a_second_release_does_not_count_twice(aredis):
    book = LoadBook(aredis)
    try:
        book.add("r0")
        book.done("r0")
        book.done("r0")
        await settle(book)
        assert await book.snapshot(["r0"]) == {"r0": 0}
        book.add("r0")
        await settle(book)
        assert await book.snapshot(["r0"]) == {"r0": 1}
    finally:
        await book.close()


async def test_a_dead_process_s_counts_vanish_after_its_ttl(aredis):
    dead, alive = LoadBook(aredis, ttl=0.3), LoadBook(aredis, ttl=30)
    try:
        dead.add("r0")
        dead.add("r1")
        alive.add("r0")
        await settle(dead, alive)
        await dead.close()  # stops refreshing, as a SIGKILLed gateway would

        async def only_the_live_count() -> bool:
            return await alive.snapshot(NAMES) == {"r0": 1, "r1": 0, "r2": 0}

        await async_wait_for(only_the_live_count, timeout=5, what="the dead process's counts to go")
        assert await aredis.smembers(PROCS) == {alive.process_id.encode()}
    finally:
        await alive.close()


async def test_the_heartbeat_renews_the_ttl_while_requests_run(aredis):
    book = LoadBook(aredis, ttl=0.6)
    try:
        book.add("r0")
        await settle(book)
        lowest = await aredis.pttl(book.hash)
        assert 0 < lowest <= 600

        async def renewed() -> bool:
            # Left alone the TTL only falls; a clear rise means the heartbeat set it again.
            nonlocal lowest
            now = await aredis.pttl(book.hash)
            lowest = min(lowest, now)
            return now > lowest + 100

        await async_wait_for(renewed, timeout=5, what="the heartbeat to renew the TTL")
        assert await book.snapshot(["r0"]) == {"r0": 1}
    finally:
        await book.close()


async def test_the_heartbeat_restores_counts_lost_by_redis(aredis):
    book = LoadBook(aredis, ttl=1.5)  # a heartbeat every 0.5 s: none lands between flush and look
    try:
        book.add("r0")
        book.add("r1")
        await settle(book)
        await aredis.flushdb()  # a Redis restarted empty
        assert await book.snapshot(NAMES) == {"r0": 0, "r1": 0, "r2": 0}

        async def restored() -> bool:
            return await book.snapshot(NAMES) == {"r0": 1, "r1": 1, "r2": 0}

        await async_wait_for(restored, timeout=5, what="the heartbeat to rewrite the counts")
    finally:
        await book.close()


async def test_an_idle_process_leaves_nothing_behind(aredis):
    book = LoadBook(aredis, ttl=0.3)
    try:
        book.add("r0")
        book.done("r0")

        async def gone() -> bool:
            await book.snapshot(["r0"])  # sweeps expired processes
            return not await aredis.exists(book.hash) and not await aredis.smembers(PROCS)

        await async_wait_for(gone, timeout=5, what="the idle process's entries to go")
    finally:
        await book.close()


async def test_a_snapshot_of_no_names_is_empty(aredis):
    assert await LoadBook(aredis).snapshot([]) == {}
