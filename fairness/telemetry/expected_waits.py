"""gpuportal_model_expected_wait_seconds: how long a request for each model arriving now would wait
in the gateway's queue behind the requests waiting there, the signal to scale engines on
(docs/operations.md has a KEDA example).

The code path of GET /v1/queue's "what a new request would wait now" and of the capacity page's
waits per tier: admission's queue_view, replayed forward by the wait estimate
(scheduling/wait_estimate.py) with a newcomer in it. The newcomer here is the back of the queue:
no head start, no cap of its tier's or its person's in its way, and a fair-share delay as large
as the largest of those waiting, so it goes after every request waiting now (and after the
arrivals expected to overtake such a request), whoever sent them. A person who has used nothing
would often go sooner; scaling is for the work already waiting. Requests held back by their own
tier's or person's cap beside free slots do not raise it: the newcomer takes a free slot, since
more replicas would not shorten those. A model nothing waits for reads 0 without a replay; a wait
beyond the replay's horizon reads the horizon (3600 s).

Read at scrape time, each model replayed at most once a second in a process however often it is
scraped (a replay costs up to about 20 ms of a thread).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping

import redis.asyncio
from prometheus_client.core import GaugeMetricFamily
from redis.exceptions import RedisError

from fairness.scheduling.admission import Admission
from fairness.scheduling.wait_estimate import HORIZON_SECONDS, Newcomer, QueueView, replay

_KEPT_SECONDS = 1.0
_kept: dict[str, tuple[float, float]] = {}  # model -> (monotonic time, its wait)
# Nobody's unit and pool: no cap of a tier or a person applies to the newcomer.
_NEWCOMER = "\x00back-of-the-queue"

HELP = ("Seconds a request for the model arriving now would wait in the gateway's queue behind the "
        "requests waiting there (the wait estimate's replay): 0 while nothing waits for the model, "
        "3600 for an hour or more.")


def back_of_the_queue(view: QueueView) -> Newcomer:
    """A newcomer that admission would grant after every request waiting in `view`."""
    delay = max((w.delay for w in view.waiting), default=0.0)
    return Newcomer(_NEWCOMER, _NEWCOMER, head_start=0.0, cap=1, delay=max(0.0, delay), borrow=False)


async def expected_waits(client: redis.asyncio.Redis, queued: Mapping[str, int]) -> dict[str, float]:
    """Model -> seconds, for each model of `queued` (model -> requests waiting for it). A model
    whose state could not be read is left out: a gap, not a false 0."""
    waits: dict[str, float] = {}
    admission: Admission | None = None
    try:
        for model, waiting in queued.items():
            kept = _kept.get(model)
            if waiting <= 0:
                waits[model] = 0.0
                _kept.pop(model, None)  # a queue that forms again starts a new estimate
            elif kept is not None and time.monotonic() - kept[0] < _KEPT_SECONDS:
                waits[model] = kept[1]
            else:
                admission = admission or Admission(client)
                view = await admission.queue_view(model)
                seconds = (await asyncio.to_thread(replay, view, admission.now(), back_of_the_queue(view))).newcomer_eta
                waits[model] = HORIZON_SECONDS if seconds is None else seconds
                _kept[model] = (time.monotonic(), waits[model])
    except (RedisError, OSError):
        pass  # what was read stands; the rest of the scrape says whether Redis is there
    finally:
        if admission is not None:
            await admission.close()
    for gone in set(_kept) - set(queued):
        del _kept[gone]  # a model no longer configured: its entry must not linger
    return waits


def family(waits: Mapping[str, float]) -> GaugeMetricFamily:
    gauge = GaugeMetricFamily("gpuportal_model_expected_wait_seconds", HELP, labels=["model"])
    for model, seconds in sorted(waits.items()):
        gauge.add_metric([model], seconds)
    return gauge
