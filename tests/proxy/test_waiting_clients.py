"""The count of connections waiting on their client: past a cap the oldest waiting are closed,
never one being served; and the pace a body must keep."""

from __future__ import annotations

from fairness.gateway.http_server import BodyPace
from fairness.gateway.waiting_clients import WaitingClients


class FakeConnection:
    def __init__(self, name: str) -> None:
        self.name = name
        self.closed = False

    def close_waiting(self) -> None:
        self.closed = True

    def __repr__(self) -> str:
        return self.name


def connections(count: int, prefix: str = "c") -> list[FakeConnection]:
    return [FakeConnection(f"{prefix}{n}") for n in range(count)]


def test_past_an_addresss_cap_its_oldest_waiting_are_closed_and_no_one_elses():
    clients = WaitingClients(max_waiting=100, max_waiting_per_address=3)
    flood, other = connections(5, "flood"), FakeConnection("other")
    clients.wait(other, "127.0.0.2")
    for connection in flood:
        clients.wait(connection, "127.0.0.1")
    assert clients.past_cap()
    assert not any(c.closed for c in flood)  # nothing is closed until close_past_caps
    clients.close_past_caps()
    assert [c.closed for c in flood] == [True, True, False, False, False]
    assert not other.closed
    assert (clients.waiting, clients.closed_past_cap, clients.past_cap()) == (4, 2, False)


def test_past_the_total_cap_the_oldest_waiting_of_all_are_closed():
    clients = WaitingClients(max_waiting=3, max_waiting_per_address=100)
    first, *rest = connections(4)
    clients.wait(first, "127.0.0.1")
    for n, connection in enumerate(rest):
        clients.wait(connection, f"127.0.0.{n + 2}")
    clients.close_past_caps()
    assert first.closed and not any(c.closed for c in rest)


def test_a_connection_being_served_is_never_closed_for_a_cap_and_is_counted_apart():
    clients = WaitingClients(max_waiting=100, max_waiting_per_address=2)
    served, *flood = connections(5)
    clients.wait(served, "127.0.0.1")
    clients.serve(served)  # its request arrived whole
    for connection in flood:
        clients.wait(connection, "127.0.0.1")
    clients.close_past_caps()
    assert not served.closed
    assert (clients.serving, clients.waiting) == (1, 2)
    assert clients.is_serving(served)


def test_a_connection_waiting_again_counts_as_the_newest():
    clients = WaitingClients(max_waiting=100, max_waiting_per_address=2)
    a, b, c = connections(3)
    clients.wait(a, "127.0.0.1")
    clients.wait(b, "127.0.0.1")
    clients.serve(a)
    clients.wait(a, "127.0.0.1")  # its response ended: it waits for the next request
    clients.wait(c, "127.0.0.1")
    clients.close_past_caps()
    assert (a.closed, b.closed, c.closed) == (False, True, False)


def test_a_closed_connection_is_forgotten():
    clients = WaitingClients(max_waiting=1, max_waiting_per_address=1)
    a, b = connections(2)
    clients.wait(a, "127.0.0.1")
    clients.forget(a)
    clients.wait(b, "127.0.0.1")
    assert not clients.past_cap()
    assert (clients.waiting, clients.serving) == (1, 0)


def test_a_body_is_due_after_the_grace_plus_a_second_for_each_rate_of_bytes_received():
    pace = BodyPace(started=100.0, grace=10.0, min_rate=1000.0)
    assert pace.due() == 110.0
    pace.received = 5000
    assert pace.due() == 115.0
    pace.restart(now=200.0)  # the server stopped reading: the count starts again
    assert (pace.due(), pace.received) == (210.0, 0)
