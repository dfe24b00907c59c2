"""Pages. The capacity page is public: it shows the endpoint, never who uses it."""

from __future__ import annotations

from asgiref.sync import sync_to_async
from django.db.models import Max
from django.http import HttpRequest, HttpResponse, HttpResponsePermanentRedirect
from django.shortcuts import render
from django.templatetags.static import static

from fairness.models import SaturationAlert, Tier
from fairness.portal.api import public as public_api
from fairness.portal.reports.fair_share_words import policy_paragraph
from fairness.telemetry.latency import ms_in_words

ALERT_KINDS = dict(SaturationAlert.Kind.choices)


def _longest_fairshare_weight() -> float:
    longest: float | None = Tier.objects.aggregate(longest=Max("fairshare_weight_seconds"))["longest"]
    return longest or 0.0


async def capacity(request: HttpRequest) -> HttpResponse:
    # The same calls the JSON API answers, so the first view needs no JavaScript and the
    # page's script, which polls the API afterwards, starts from identical figures.
    now = await public_api.capacity(request)
    series = await public_api.series(request, "hour")
    context = {
        "now": now,
        "waiting": now.totals.waiting_engine + now.totals.waiting_gateway,
        "gpu_rows": [r for r in now.replicas if r.gpu],  # a replica with no GPU exporter shows none
        "ttft": [
            {"tier": t.name, "p50": ms_in_words(t.ttft_p50_ms), "p95": ms_in_words(t.ttft_p95_ms),
             "requests": t.ttft_requests}
            for t in now.tiers
        ],
        "fair_share": policy_paragraph(await sync_to_async(_longest_fairshare_weight)()),
        "alerts": [
            {**a.model_dump(), "kind_label": ALERT_KINDS.get(a.kind, a.kind)} for a in now.alerts
        ],
        "initial": {
            "capacity": now.model_dump(mode="json"),
            "series": series.model_dump(mode="json"),
            "alert_kinds": ALERT_KINDS,
        },
    }
    # Rendered off the event loop: the base template may ask who is signed in (a database query).
    return await sync_to_async(render)(request, "capacity.html", context)


async def favicon(request: HttpRequest) -> HttpResponse:
    """Browsers ask for /favicon.ico whatever a page links (a JSON answer links nothing): the
    portal's icon, rather than a 404 in the log each time."""
    return HttpResponsePermanentRedirect(static("favicon.svg"))
