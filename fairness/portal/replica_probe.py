"""One look at a replica a staff member just added or re-addressed: does it answer, and does it
serve the model it was added for? A warning, never a refusal (an engine may be added before it
starts). Only the address staff gave is asked, once, with a short timeout and no redirects
followed (the outbound seam's client follows none), and the warning never quotes what the
answer said: an address pointed elsewhere (a metadata service, an admin page) must not have its
content shown on the page."""

from __future__ import annotations

from asgiref.sync import async_to_sync

from fairness.gateway import engine_client
from fairness.gateway.errors import ApiError
from fairness.gateway.replica_rows import replica_info
from fairness.models import Replica

PROBE_TIMEOUT_SECONDS = 3.0


@async_to_sync
async def _models(replica: Replica) -> tuple[int, object]:
    response = await engine_client.get(replica_info(replica), "/v1/models", PROBE_TIMEOUT_SECONDS)
    try:
        return response.status_code, response.json()
    except ValueError:
        return response.status_code, None


def warning(replica: Replica) -> str:
    """Why the replica looks wrong ("" when it answers and lists its model)."""
    where = f"{replica.name} at {replica.base_url}"
    try:
        status, body = _models(replica)
    except ApiError as exc:
        return f"{where} did not answer: {exc.message}"
    except Exception as exc:  # anything odd: say so, and let staff look
        return f"{where} could not be asked for its models ({type(exc).__name__})."
    if not 200 <= status < 300:
        return f"{where} answered /v1/models with HTTP {status}."
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        return f"{where} answered /v1/models without a list of models: is it an OpenAI-compatible engine?"
    if not any(isinstance(m, dict) and m.get("id") == replica.model for m in data):
        return f"{where} does not serve the model “{replica.model}”: its /v1/models does not list it."
    return ""
