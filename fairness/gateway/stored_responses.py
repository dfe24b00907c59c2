"""Where each stored Responses API response lives, and whose it is.

vLLM keeps a stored response (`store`, on by default, when the engine runs with
VLLM_ENABLE_RESPONSES_API_STORE=1) in the memory of the one server that made it, and answers 404
for it anywhere else. So the gateway notes, per response id, the replica that made it and the
person whose key asked: a turn naming `previous_response_id` is pinned to that replica
(admission's pinned group), and GET and DELETE reach a response only for the person who made it.
An id someone else made is answered as one that does not exist.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import redis.asyncio
from django.conf import settings
from redis.exceptions import RedisError

from fairness.gateway import request_parsing
from fairness.gateway.api_keys import KeyInfo
from fairness.gateway.errors import ApiError
from fairness.gateway.request_parsing import ProxyRequest
from fairness.gateway.runtime import GatewayRuntime
from fairness.scheduling.directory import ReplicaInfo
from fairness.store import keyspace

log = logging.getLogger(__name__)

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


def not_found(response_id: str, param: str, why: str = "") -> ApiError:
    # The same words whether it never existed or is someone else's: nothing to learn by probing.
    return ApiError(404, f"Response with id '{response_id[:MOST_ID_CHARS]}' not found.{why}", "response_not_found",
                    param=param)


async def pinned_replica(
    runtime: GatewayRuntime, key: KeyInfo, parsed: ProxyRequest, replicas: list[ReplicaInfo]
) -> ReplicaInfo | None:
    """The replica a Responses turn must run on: the one that stored its previous response."""
    previous = parsed.payload.get("previous_response_id")
    if parsed.endpoint != request_parsing.RESPONSES or previous is None:
        return None
    stored = await find(runtime.redis, previous, key.person_id)
    if stored is None:
        raise not_found(previous, "previous_response_id")
    replica = next((r for r in replicas if r.name == stored.replica), None)
    if replica is None:
        raise not_found(previous, "previous_response_id",
                        f" It was stored by replica {stored.replica}, which no longer serves '{parsed.model}' to "
                        "your tier: start the conversation again without it.")
    if not runtime.replica_up(replica.name):
        raise ApiError(503, f"The replica that stored response '{previous}' ({replica.name}) is down; the "
                       "conversation can go on once it is back.", "stored_replica_unavailable", retry_after=10)
    return replica


async def remember_response(
    runtime: GatewayRuntime, response_id: str, *, replica: str, person_id: int, parsed: ProxyRequest
) -> None:
    """Note a Responses answer the engine stored (unless the request said `store: false`)."""
    if parsed.payload.get("store") is False:
        return
    try:
        await remember(runtime.redis, response_id, StoredResponse(replica, person_id, parsed.model),
                       settings.GP_STORED_RESPONSE_DAYS)
    except RedisError:  # the answer still goes out, and is charged; only its next turn cannot find it
        log.warning("could not note where response %s is stored", response_id, exc_info=True)
