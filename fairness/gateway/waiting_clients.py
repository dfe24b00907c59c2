"""Which connections the server is waiting on, and which it is serving, for one server.

A connection is *waiting* while its client owes the server bytes: from the moment it opens (or a
response on it ends) until a request has arrived whole, headers and body. It is *serving* from
then until the response ends. A client that wants to hold the server's connections without
being served must keep them waiting, since a request that arrives whole is answered (a 401
without a key) and the connection waits again. So the two are counted apart:

- Waiting connections are capped per client address and in total; past a cap the *oldest*
  waiting connection (of that address, or of all) is closed. A real request is waiting only
  for the moment its bytes take to arrive, so under a flood of idle or trickling connections
  it is nearly always the newest, and it is the flood that gets closed. Not at once, though:
  the server accepts connections in bursts (all those queued, before reading any), and a request
  amid a burst of a flood's reconnections would be closed, unread, by those accepted after it.
  So the closing is done a moment later (`close_past_caps`), once what came with the burst is read.
- Requests served are what the server's concurrency limit counts (`--limit-concurrency`), so
  idle and trickling connections no longer make the requests that did arrive get 503.
"""

from __future__ import annotations

from typing import Protocol


class Connection(Protocol):
    def close_waiting(self) -> None:
        """Close this connection: it is the oldest waiting past a cap."""


class WaitingClients:
    def __init__(self, max_waiting: int, max_waiting_per_address: int) -> None:
        self.max_waiting = max_waiting
        self.max_waiting_per_address = max_waiting_per_address
        self.closed_past_cap = 0  # waiting connections closed to make room, since start
        # Dicts as ordered sets: oldest first.
        self._waiting: dict[Connection, str] = {}
        self._waiting_at: dict[str, dict[Connection, None]] = {}
        self._serving: set[Connection] = set()
        self._crowded: set[str] = set()  # addresses past their cap since the last close_past_caps
        self.closing_scheduled = False  # for the server: a close_past_caps is to come

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    @property
    def serving(self) -> int:
        return len(self._serving)

    def is_serving(self, connection: Connection) -> bool:
        return connection in self._serving

    def wait(self, connection: Connection, address: str) -> None:
        """`connection` now waits on its client, as the newest (call close_past_caps soon after)."""
        self.forget(connection)
        self._waiting[connection] = address
        here = self._waiting_at.setdefault(address, {})
        here[connection] = None
        if len(here) > self.max_waiting_per_address:
            self._crowded.add(address)

    def past_cap(self) -> bool:
        return bool(self._crowded) or len(self._waiting) > self.max_waiting

    def close_past_caps(self) -> None:
        """Close the oldest waiting connections until every address, and all, are within the caps."""
        for address in self._crowded:
            here = self._waiting_at.get(address, {})
            while len(here) > self.max_waiting_per_address:
                self._close(next(iter(here)))
        self._crowded.clear()
        while len(self._waiting) > self.max_waiting:
            self._close(next(iter(self._waiting)))

    def serve(self, connection: Connection) -> None:
        """`connection`'s request has arrived whole: it is served, and counts as such."""
        self.forget(connection)
        self._serving.add(connection)

    def forget(self, connection: Connection) -> None:
        """`connection` is neither waiting nor served (it closed, or is about to change)."""
        self._serving.discard(connection)
        address = self._waiting.pop(connection, None)
        if address is None:
            return
        here = self._waiting_at[address]
        del here[connection]
        if not here:
            del self._waiting_at[address]

    def _close(self, connection: Connection) -> None:
        self.forget(connection)
        self.closed_past_cap += 1
        connection.close_waiting()
