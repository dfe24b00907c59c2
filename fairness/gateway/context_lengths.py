"""Each replica's context length, as its engine states it (vLLM's GET /v1/models, `max_model_len`).

A budgeted request that names no completion limit runs to the end of the context, so its budgets
are asked for the context less its prompt, and an abandoned one is charged at most that. The
figure is read off the request path, by each gateway process's health loop: once per replica after
it comes up (a restart may bring a different one), kept in the process. A request's model gets the
smallest figure among the replicas that may serve it; until one has answered,
GP_MODEL_CONTEXT_TOKENS stands in.

The answer is the engine's and read as a hostile one: at most MAX_ANSWER_BYTES, and a figure only
when it is a whole number within sane bounds.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Collection, Sequence
from typing import Any

from django.conf import settings

from fairness.gateway import engine_client
from fairness.gateway.errors import ApiError
from fairness.scheduling.directory import ReplicaInfo

log = logging.getLogger(__name__)

# vLLM lists its model and each LoRA adapter, a few hundred bytes a card.
MAX_ANSWER_BYTES = 256 * 1024
# No model worth serving holds fewer tokens; the longest contexts served today are about ten million.
LEAST_CONTEXT = 128
MOST_CONTEXT = 1 << 24


def stated_context(answer: Any, model: str) -> int | None:
    """The `max_model_len` a parsed /v1/models answer states for `model`, or None."""
    cards = answer.get("data") if isinstance(answer, dict) else None
    if not isinstance(cards, list):
        return None
    for card in cards:
        if isinstance(card, dict) and card.get("id") == model:
            figure = card.get("max_model_len")
            if isinstance(figure, int) and not isinstance(figure, bool) and LEAST_CONTEXT <= figure <= MOST_CONTEXT:
                return figure
            return None
    return None


async def read_context(replica: ReplicaInfo, timeout: float) -> int | None:
    """The replica's own context length for its model, or None when it states none we take."""
    try:
        status, answer = await engine_client.get_capped(replica, "/v1/models", timeout, MAX_ANSWER_BYTES)
    except ApiError as exc:
        log.info("no context length from %s: %s", replica.name, exc.code)
        return None
    if status != 200:
        return None
    try:
        return stated_context(json.loads(answer), replica.model)
    except (ValueError, RecursionError):
        return None


class ContextLengths:
    """What this process knows of its replicas' context lengths."""

    def __init__(self) -> None:
        self._figures: dict[str, tuple[ReplicaInfo, int]] = {}
        self._read: dict[str, ReplicaInfo] = {}  # asked since it last came up, answer or not

    async def learn(self, replicas: Sequence[ReplicaInfo], up: Collection[str], timeout: float) -> None:
        """Ask each replica that is up and not yet asked since it came up (or whose row changed)."""
        for name in set(self._read) - set(up):
            del self._read[name]  # asked again when it comes back
        for name in set(self._figures) - {r.name for r in replicas}:
            del self._figures[name]  # a replica removed from the configuration
        due = [r for r in replicas if r.name in up and self._read.get(r.name) != r]
        figures = await asyncio.gather(*(read_context(r, timeout) for r in due))
        for replica, figure in zip(due, figures, strict=True):
            self._read[replica.name] = replica
            if figure is not None:
                self._figures[replica.name] = (replica, figure)
            else:
                self._figures.pop(replica.name, None)

    def of(self, replicas: Sequence[ReplicaInfo]) -> int:
        """The context every one of these replicas holds, as far as known."""
        stated = self.stated(replicas)
        return int(settings.GP_MODEL_CONTEXT_TOKENS) if stated is None else stated

    def stated(self, replicas: Sequence[ReplicaInfo]) -> int | None:
        """The context every one of these replicas holds by their engines' word; None before any said."""
        known = []
        for replica in replicas:
            entry = self._figures.get(replica.name)
            if entry is not None and entry[0] == replica:  # not a figure of the row before a change
                known.append(entry[1])
        return min(known) if known else None
