"""Where each stored Responses API response lives, and whose it is.

vLLM keeps a stored response (`store`, on by default, when the engine runs with
VLLM_ENABLE_RESPONSES_API_STORE=1) in the memory of the one server that made it, and answers 404
for it anywhere else. So the gateway notes, per response id, the replica that made it and the
person whose key asked: a turn naming `previous_response_id` is pinned to that replica
(admission's pinned group), and GET and DELETE reach a response only for the person who made it.
An id someone else made is answered as one that does not exist.
"""

from __future__ import annotations

from dataclasses import dataclass

import redis.asyncio

from fairness.store import keyspace

MOST_ID_CHARS = 200  # vLLM's ids are "resp_" and 32 hex digits; anything far longer is not one


@dataclass(frozen=True)
class StoredResponse:
    replica: str
    person_id: int
    model: str


def _key(response_id: str) -> str:
    return keyspace.STORED_RESPONSE + response_id


def plausible_id(response_id: object) -> bool:
    return isinstance(response_id, str) and 0 < len(response_id) <= MOST_ID_CHARS and response_id.isprintable()


async def remember(client: redis.asyncio.Redis, response_id: str, stored: StoredResponse, days: float) -> None:
    if plausible_id(response_id):
        value = f"{stored.replica}|{stored.person_id}|{stored.model}"
        await client.set(_key(response_id), value, ex=max(1, round(days * 86400)))


async def find(client: redis.asyncio.Redis, response_id: str, person_id: int) -> StoredResponse | None:
    """The response, if it exists and is this person's; None otherwise (the same for both)."""
    if not plausible_id(response_id):
        return None
    raw = await client.get(_key(response_id))
    if raw is None:
        return None
    replica, person, model = (raw.decode() if isinstance(raw, bytes) else raw).split("|", 2)
    if int(person) != person_id:
        return None
    return StoredResponse(replica, person_id, model)


async def forget(client: redis.asyncio.Redis, response_id: str) -> None:
    await client.delete(_key(response_id))
