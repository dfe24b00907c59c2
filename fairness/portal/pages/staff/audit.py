"""The staff audit log: every change, newest first, narrowed to one actor, one action or a target,
or searched for any text, a page at a time; and the same rows as CSV."""

from __future__ import annotations

import csv
import json
from urllib.parse import urlencode

from django.core.paginator import Paginator
from django.http import HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_safe

from fairness.models import AuditEntry, AuditEntryQuerySet
from fairness.portal.pages.common import staff_required
from fairness.portal.signed_in import SignedInRequest

AUDIT_PAGE_SIZE = 100
# The query string the page and its CSV read: q is the free-text search.
FILTERS = ("actor", "action", "target", "q")
FILTER_LENGTH = 200  # the longest column searched (target)
CSV_COLUMNS = ("at_utc", "actor", "action", "target", "detail", "from")
# A spreadsheet runs a cell that starts with one of these as a formula, and actors, targets and
# details hold names people chose.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def _filters(request: SignedInRequest) -> dict[str, str]:
    """The filters as the query string gives them, cut to what a column can hold (a NUL, which
    PostgreSQL refuses in text, dropped)."""
    return {name: request.GET.get(name, "").replace("\x00", "").strip()[:FILTER_LENGTH] for name in FILTERS}


def _entries(filters: dict[str, str]) -> AuditEntryQuerySet:
    return AuditEntry.objects.matching(actor=filters["actor"], action=filters["action"], target=filters["target"],
                                       text=filters["q"])


def _options(known: list[str], chosen: str) -> list[str]:
    # A link may name a value the log no longer lists first (or never did): the select still shows it.
    return known if not chosen or chosen in known else [chosen, *known]


def spreadsheet_safe(value: str) -> str:
    return "'" + value if value.startswith(FORMULA_STARTS) else value


@staff_required
@require_safe
def audit(request: SignedInRequest) -> HttpResponse:
    filters = _filters(request)
    page = Paginator(_entries(filters), AUDIT_PAGE_SIZE).get_page(request.GET.get("page"))
    query = urlencode({name: value for name, value in filters.items() if value})
    return render(request, "staff/audit.html", {
        "page": page, "filters": filters, "query": query,
        "actors": _options(AuditEntry.objects.actor_names(), filters["actor"]),
        "actions": _options(AuditEntry.objects.actions(), filters["action"]),
    })


@staff_required
@require_safe
def audit_csv(request: SignedInRequest) -> HttpResponse:
    """Every entry the page's filters pick (not one page of them), newest first."""
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="audit-log-{timezone.now():%Y%m%d-%H%M}.csv"'
    # The default "\r\n" between rows, so that a CR or LF inside a cell gets the cell quoted.
    writer = csv.writer(response)
    writer.writerow(CSV_COLUMNS)
    for entry in _entries(_filters(request)).iterator(chunk_size=2000):
        detail = json.dumps(entry.detail, ensure_ascii=False)
        writer.writerow([spreadsheet_safe(cell) for cell in (
            entry.at.isoformat(), entry.actor_name, entry.action, entry.target, detail, entry.ip or "",
        )])
    return response
