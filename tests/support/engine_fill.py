"""A stalled engine whose slots a person's hanging requests hold, and its release."""

from __future__ import annotations

import socket

from fairness.scheduling.live_counts import person_load
from fairness.store.redis_clients import redis_sync
from tests.support.polling import wait_for
from tests.support.v1_calls import hanging_chat


def fill_the_engine(gateway, sim, secret: str, user, tier: str) -> list[socket.socket]:
    sim.set_faults(stall=True)
    held = [hanging_chat(gateway, secret) for _ in range(2)]
    wait_for(lambda: person_load(redis_sync()).get((user.pk, tier), (0, 0))[0] == 2, what="both slots taken")
    return held


def free_the_engine(sim, held: list[socket.socket]) -> None:
    sim.set_faults(stall=False)
    for conn in held:
        conn.shutdown(socket.SHUT_RDWR)
        conn.close()


