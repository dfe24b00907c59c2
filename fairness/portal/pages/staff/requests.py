"""The staff request log: every request, newest first, narrowed to a person, a key, a model, a
status or an ending and a time range, a page at a time; one request's timeline; and the rows the
filters pick as CSV. Only what the records hold: never a prompt or an answer."""

from __future__ import annotations

from django.http import Http404, HttpResponse, StreamingHttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_safe

from fairness.models import UsageRecord
from fairness.portal.pages.common import staff_required
from fairness.portal.reports import request_log
from fairness.portal.signed_in import SignedInRequest


def _get_request_for_staff(request_id: str) -> UsageRecord:
    record = UsageRecord.objects.select_related("key", "person").filter(request_id=request_id).first()
    if record is None:
        raise Http404("No such request in the log.")
    return record


@staff_required
@require_safe
def requests_log(request: SignedInRequest) -> HttpResponse:
    filters = request_log.read_filters(request.GET, with_person=True)
    page = request_log.page_of(request_log.rows_for(filters), before=request.GET.get("before", ""),
                               after=request.GET.get("after", ""))
    return render(request, "staff/requests.html", request_log.page_context(filters, page),
                  status=400 if filters.problems else 200)


@staff_required
@require_safe
def request_detail(request: SignedInRequest, request_id: str) -> HttpResponse:
    record = _get_request_for_staff(request_id)
    return render(request, "staff/request.html", request_log.detail_context(record))


@staff_required
@require_safe
def requests_csv(request: SignedInRequest) -> HttpResponse | StreamingHttpResponse:
    """Every row the page's filters pick (not one page of them), newest first, streamed."""
    filters = request_log.read_filters(request.GET, with_person=True)
    if filters.problems:
        return HttpResponse(" ".join(filters.problems), status=400, content_type="text/plain; charset=utf-8")
    rows = request_log.rows_for(filters).iterator(chunk_size=2000)
    response = StreamingHttpResponse(request_log.csv_lines(rows), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="requests-{timezone.now():%Y%m%d-%H%M}.csv"'
    return response
