"""Replica choice: conversation affinity by rendezvous hashing, bounded load, health.

Conversation key: the `X-Session-ID` header when given; otherwise derived from the body, so every
turn of one chat reaches the replica holding its prefix in cache without client changes:
  - chat: the model and every message up to and including the first `user` one (system prompts
    and the first question). Each turn resends the history and only appends, so this opening is
    the same in every turn. A string and a list of text parts with the same text count alike;
    non-text parts (images, audio) count by their JSON;
  - completions: the model and the prompt's first PROMPT_PREFIX_CHARS characters (or that many
    token ids); a batch counts by its first prompt. Prompts sharing that head share a key on
    purpose: they share a cacheable prefix too. An empty prompt has no key (least loaded wins).

Choice: the key ranks replicas by highest random weight (rendezvous hashing), so adding or
removing one of N moves only the ~1/N of conversations it takes or held. Bounded load (Mirrokni
et al.) skips a replica that would exceed ceil((1 + ε) · (in flight + 1) / N) or has no free slot
for the next in the key's order; all skipped, the least loaded by in_flight / max_num_seqs wins.

Where it runs: admission applies the rule in Redis when it grants a lease (choose_replica in
lua/lib/replicas.lua), over every replica's leases in flight, so the lease and the replica's slot are one
atomic step: no replica is ever sent more than its slots, however many gateway processes route,
and the counts end with the leases. `choose` below is the same rule in Python, its specification:
tests check the script against it.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from fairness.scheduling.directory import ReplicaInfo

PROMPT_PREFIX_CHARS = 256
DEFAULT_EPSILON = 0.25
DEFAULT_BOUND_FLOOR = 0.375


# -- conversation key ---------------------------------------------------------------------------


def conversation_key(
    payload: Mapping[str, Any],
    session_id: str | None = None,
    prompt_chars: int = PROMPT_PREFIX_CHARS,
) -> str | None:
    """The affinity key of a chat or completions request body; None when it has none."""
    if session_id and session_id.strip():
        return "s:" + _digest(session_id.strip())
    model = payload.get("model")
    messages = payload.get("messages")
    if isinstance(messages, list):
        opening = _opening(messages)
        return "c:" + _digest(model, opening) if opening else None
    head = _prompt_head(payload.get("prompt"), prompt_chars)
    return "p:" + _digest(model, head) if head else None


def _digest(*parts: Any) -> str:
    canonical = json.dumps(parts, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    return hashlib.blake2b(canonical.encode(), digest_size=16).hexdigest()


def _opening(messages: list[Any]) -> list[list[str]]:
    opening = []
    for message in messages:
        if not isinstance(message, dict):
            continue
        role = str(message.get("role", ""))
        opening.append([role, _text(message.get("content"))])
        if role == "user":
            break
    return opening


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = content if isinstance(content, list) else [content]
    return "\n".join(_part_text(part) for part in parts if part is not None)


def _part_text(part: Any) -> str:
    if isinstance(part, str):
        return part
    if isinstance(part, dict) and part.get("type") == "text":
        return str(part.get("text", ""))
    return json.dumps(part, sort_keys=True, separators=(",", ":"))


def _prompt_head(prompt: Any, chars: int) -> list[Any] | None:
    if isinstance(prompt, list) and prompt and not isinstance(prompt[0], int):
        prompt = prompt[0]  # a batch: its first prompt stands for it
    if isinstance(prompt, str) and prompt:
        return ["text", prompt[:chars]]
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt[:chars]):
        return ["tokens", prompt[:chars]]
    return None


# -- rendezvous order and bounded load ----------------------------------------------------------


def _weight(key: str, name: str) -> int:
    digest = hashlib.blake2b(f"{key}\x00{name}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def preference(replicas: Sequence[ReplicaInfo], key: str) -> list[ReplicaInfo]:
    """All replicas, the key's favourite first (highest random weight; name breaks a tie)."""
    return sorted(replicas, key=lambda r: (_weight(key, r.name), r.name), reverse=True)


def choose(
    candidates: Sequence[ReplicaInfo],
    key: str | None,
    load: Mapping[str, int],
    epsilon: float = DEFAULT_EPSILON,
    floor: float = DEFAULT_BOUND_FLOOR,
) -> list[ReplicaInfo]:
    """Every candidate in the order to try: the first is the choice, the second the retry.

    The bound never falls below `floor` × a replica's slots: while a replica is that lightly
    loaded, another sequence barely slows its batch, and moving a conversation would re-prefill
    its whole history elsewhere — the prefix cache is worth more than the balance.
    """

    def busy(replica: ReplicaInfo) -> int:
        return max(0, load.get(replica.name, 0))

    def utilisation(replica: ReplicaInfo) -> float:
        return busy(replica) / max(1, replica.max_num_seqs)

    if key is None:
        return sorted(candidates, key=lambda r: (utilisation(r), r.name))
    if not candidates:
        return []
    total = sum(busy(r) for r in candidates)
    # The tolerance keeps float noise from lifting an exact product to the next integer.
    bound = math.ceil((1 + epsilon) * (total + 1) / len(candidates) - 1e-9)
    order = preference(candidates, key)
    fits = [
        r for r in order
        if busy(r) + 1 <= max(bound, math.floor(floor * r.max_num_seqs)) and busy(r) < r.max_num_seqs
    ]
    taken = {r.name for r in fits}
    # sorted() is stable: among equally loaded replicas the key's own order still decides.
    rest = sorted((r for r in order if r.name not in taken), key=utilisation)
    return fits + rest
