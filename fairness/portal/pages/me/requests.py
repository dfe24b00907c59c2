"""One's own request log: the same filters as staff's but the person (it is always one's own),
one request's timeline, and the CSV. Another person's request is a 404, as one that never was."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse, StreamingHttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_safe

from fairness.models import UsageRecord
from fairness.portal.reports import request_log
from fairness.portal.signed_in import SignedInRequest


def _get_request_for_user(request: SignedInRequest, request_id: str) -> UsageRecord:
    record = (UsageRecord.objects.select_related("key", "person")
              .filter(request_id=request_id, person=request.user).first())
    if record is None:
        raise Http404("No such request of yours in the log.")
    return record


@login_required
@require_safe
def my_requests(request: SignedInRequest) -> HttpResponse:
    filters = request_log.read_filters(request.GET, with_person=False)
    page = request_log.page_of(request_log.rows_for(filters, person_id=request.user.pk),
                               before=request.GET.get("before", ""), after=request.GET.get("after", ""))
    return render(request, "me/requests.html", request_log.page_context(filters, page),
                  status=400 if filters.problems else 200)


@login_required
@require_safe
def my_request(request: SignedInRequest, request_id: str) -> HttpResponse:
    record = _get_request_for_user(request, request_id)
    return render(request, "me/request.html", request_log.detail_context(record))


@login_required
@require_safe
def my_requests_csv(request: SignedInRequest) -> HttpResponse | StreamingHttpResponse:
    filters = request_log.read_filters(request.GET, with_person=False)
    if filters.problems:
        return HttpResponse(" ".join(filters.problems), status=400, content_type="text/plain; charset=utf-8")
    rows = request_log.rows_for(filters, person_id=request.user.pk).iterator(chunk_size=2000)
    response = StreamingHttpResponse(request_log.csv_lines(rows), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="my-requests-{timezone.now():%Y%m%d-%H%M}.csv"'
    return response
