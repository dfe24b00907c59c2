"""The engine's waiting queue: FCFS, or vLLM's ``--scheduling-policy priority``.

Priority order is the request's integer ``priority`` (lower first), ties by arrival; no ageing,
like vLLM. Items must expose ``priority`` and ``arrival_no`` (a per-engine arrival counter).
"""

from __future__ import annotations

import heapq
from collections import deque
from typing import Generic, Protocol, TypeVar


class Queued(Protocol):
    priority: int
    arrival_no: int


T = TypeVar("T", bound=Queued)


class FcfsQueue(Generic[T]):
    def __init__(self) -> None:
        self._items: deque[T] = deque()

    def __len__(self) -> int:
        return len(self._items)

    def push(self, item: T) -> None:
        self._items.append(item)

    def push_preempted(self, item: T) -> None:
        # A preempted sequence goes back to the head: it arrived before everyone waiting.
        self._items.appendleft(item)

    def peek(self) -> T:
        return self._items[0]

    def pop(self) -> T:
        return self._items.popleft()

    def remove(self, item: T) -> None:
        self._items.remove(item)


class PriorityQueue(Generic[T]):
    def __init__(self) -> None:
        self._heap: list[tuple[int, int, T]] = []
        self._removed: set[int] = set()  # arrival_no of entries removed in place (lazy deletion)

    def __len__(self) -> int:
        return len(self._heap) - len(self._removed)

    def push(self, item: T) -> None:
        heapq.heappush(self._heap, (item.priority, item.arrival_no, item))

    def push_preempted(self, item: T) -> None:
        # Its original key already places it correctly among its peers.
        self.push(item)

    def _drop_removed(self) -> None:
        while self._heap and self._heap[0][1] in self._removed:
            self._removed.discard(heapq.heappop(self._heap)[1])

    def peek(self) -> T:
        self._drop_removed()
        return self._heap[0][2]

    def pop(self) -> T:
        self._drop_removed()
        return heapq.heappop(self._heap)[2]

    def remove(self, item: T) -> None:
        self._removed.add(item.arrival_no)


def make_queue(policy: str) -> FcfsQueue[T] | PriorityQueue[T]:
    if policy == "fcfs":
        return FcfsQueue()
    if policy == "priority":
        return PriorityQueue()
    raise ValueError(f"unknown scheduling policy {policy!r}")
