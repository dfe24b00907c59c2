"""One look at a replica a staff member is adding or changing: does it answer, which models does
it serve, and what does its KV cache hold? The form fills in a model left empty from the answer
and refuses a --max-num-seqs the cache could never run; the page warns of the rest. A silent
engine is a warning, never a refusal (an engine may be added before it starts).

Only the address staff gave is asked, with a short timeout, no redirects followed (the outbound
seam's client follows none) and every answer read only up to a bound. The page never quotes an
answer: it takes from one only model ids found in an OpenAI model list, each checked as a model
name, and whole numbers, so an address pointed elsewhere (a metadata service, an admin page)
cannot have its content shown.

What an engine states, and what it does not: vLLM's GET /v1/models gives each served id with its
`max_model_len`, and its `vllm:cache_config_info` gauge the KV cache's `block_size` and
`num_gpu_blocks`. Neither states --max-num-seqs (a scheduler setting, not a cache one), so the
figure staff type cannot be checked against the engine's own. What the figures do settle: each
running sequence holds at least one KV block of its own, so more sequences than blocks never run
at once (refused); and only so many full-context sequences fit (a warning when that is fewer).
"""

from __future__ import annotations

import dataclasses
import json
import time

from asgiref.sync import async_to_sync
from django.core.exceptions import ValidationError

from fairness.gateway import engine_client
from fairness.gateway.context_lengths import MAX_ANSWER_BYTES, stated_context
from fairness.gateway.errors import ApiError
from fairness.gateway.replica_rows import replica_info
from fairness.models import Replica, model_name_validator
from fairness.scheduling.directory import ReplicaInfo
from fairness.telemetry.metrics_parser import parse_metrics

PROBE_TIMEOUT_SECONDS = 3.0
# vLLM's /metrics, every histogram included, is tens of kilobytes.
MAX_METRICS_BYTES = 4 * 1024 * 1024
MAX_MODELS_NAMED = 5


@dataclasses.dataclass(frozen=True)
class EngineFacts:
    """What one look at an engine found. None: the engine did not state that figure."""

    where: str  # "gpu1 at http://10.0.0.5:8000"
    problem: str = ""  # why there is no list of models ("" when there is one)
    models: tuple[str, ...] = ()  # the ids on its /v1/models that are model names
    context: int | None = None  # the `max_model_len` it states for the replica's model
    kv_blocks: int | None = None  # over all data-parallel engines
    kv_tokens: int | None = None


def served_models(answer: object) -> tuple[str, ...]:
    """The ids a parsed /v1/models answer lists, each once, leaving out any that is not a model name."""
    cards = answer.get("data") if isinstance(answer, dict) else None
    ids: list[str] = []
    for card in cards if isinstance(cards, list) else ():
        model = card.get("id") if isinstance(card, dict) else None
        if isinstance(model, str) and 0 < len(model) <= 200 and model not in ids:
            try:
                model_name_validator(model)
            except ValidationError:
                continue
            ids.append(model)
    return tuple(ids)


def _named(models: tuple[str, ...]) -> str:
    shown = ", ".join(f"“{m}”" for m in models[:MAX_MODELS_NAMED])
    return shown + (f" and {len(models) - MAX_MODELS_NAMED} more" if len(models) > MAX_MODELS_NAMED else "")


async def _kv_cache(info: ReplicaInfo) -> tuple[int | None, int | None]:
    """(blocks, tokens) its /metrics states; (None, None) for any trouble: the poller reports that."""
    try:
        status, body = await engine_client.get_capped(info, "/metrics", PROBE_TIMEOUT_SECONDS, MAX_METRICS_BYTES)
        if status != 200:
            return None, None
        snapshot = parse_metrics(body.decode("utf-8", "replace"), info.engine_kind, time.time(), model=info.model)
    except Exception:  # a missing, odd or unreadable /metrics leaves the figures unknown, nothing more
        return None, None
    return snapshot.num_gpu_blocks, snapshot.kv_capacity_tokens


async def _look(replica: Replica) -> EngineFacts:
    where = f"{replica.name} at {replica.base_url}"
    info = replica_info(replica)
    try:
        status, body = await engine_client.get_capped(info, "/v1/models", PROBE_TIMEOUT_SECONDS, MAX_ANSWER_BYTES)
    except ApiError as exc:
        return EngineFacts(where, f"{where} did not answer: {exc.message}")
    except Exception as exc:  # anything odd: say so, and let staff look
        return EngineFacts(where, f"{where} could not be asked for its models ({type(exc).__name__}).")
    if not 200 <= status < 300:
        return EngineFacts(where, f"{where} answered /v1/models with HTTP {status}.")
    try:
        answer = json.loads(body)
    except (ValueError, RecursionError):
        answer = None
    if not isinstance(answer, dict) or not isinstance(answer.get("data"), list):
        return EngineFacts(where, f"{where} answered /v1/models without a list of models: "
                                  "is it an OpenAI-compatible engine?")
    models = served_models(answer)
    # An empty model is the one the engine serves, if it serves only one.
    model = replica.model or (models[0] if len(models) == 1 else "")
    blocks, tokens = await _kv_cache(dataclasses.replace(info, model=model)) if model else (None, None)
    return EngineFacts(where, "", models, stated_context(answer, model) if model else None, blocks, tokens)


@async_to_sync
async def look(replica: Replica) -> EngineFacts:
    """Ask the replica's engine (its /v1/models, then its /metrics) as the row stands, saved or not."""
    return await _look(replica)


def model_to_fill(facts: EngineFacts) -> tuple[str, str]:
    """(the model to fill an empty model field with, "") or ("", why there is none)."""
    if facts.problem:
        return "", f"{facts.problem} Its model could not be read from it: type the model’s name."
    if not facts.models:
        return "", f"{facts.where} lists no model on /v1/models: type the model’s name."
    if len(facts.models) > 1:
        return "", (f"{facts.where} serves {len(facts.models)} models ({_named(facts.models)}): "
                    "type the one this replica is for.")
    return facts.models[0], ""


def sequences_refused(facts: EngineFacts, max_num_seqs: int) -> str:
    """Why the engine could never run `max_num_seqs` sequences at once ("" when it might)."""
    if facts.kv_blocks is None or max_num_seqs <= facts.kv_blocks:
        return ""
    return (f"{facts.where} has {facts.kv_blocks:,} KV-cache blocks and every running sequence holds at least "
            f"one of its own, so it can never run {max_num_seqs:,} at once. Give at most {facts.kv_blocks:,}, and "
            "no more than the --max-num-seqs it was started with (vLLM does not report that figure).")


def model_warning(replica: Replica, facts: EngineFacts) -> str:
    """Why the replica looks wrong ("" when it answers and lists its model)."""
    if facts.problem:
        return facts.problem
    if replica.model not in facts.models:
        lists = f"lists {_named(facts.models)}" if facts.models else "lists no model"
        return f"{facts.where} does not serve the model “{replica.model}”: its /v1/models {lists}."
    return ""


def cache_warning(replica: Replica, facts: EngineFacts) -> str:
    """When fewer sequences of the full context fit in the KV cache than the gateway lets run
    on the replica ("" when they all fit, or the engine states too little to tell)."""
    if facts.context is None or facts.kv_tokens is None:
        return ""
    fit = facts.kv_tokens // facts.context
    if fit >= replica.max_num_seqs:
        return ""
    sequences = f"{fit:,} sequence{'s' if fit != 1 else ''}"
    return (f"{facts.where} holds {facts.kv_tokens:,} tokens in its KV cache: {sequences} "
            f"of its full context ({facts.context:,} tokens) at once, fewer than the {replica.max_num_seqs:,} "
            "the gateway lets run there. Long requests beyond that wait inside the engine, out of the "
            "gateway’s fair order.")
