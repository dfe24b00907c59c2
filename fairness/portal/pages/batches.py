"""Batches on the pages: /me/batches/ (a researcher's own, with their result files) and
/staff/batches/ (everyone's, to cancel one that should not run).

A batch and its files belong to their owner: anyone else's is a 404, exactly like one that does
not exist, and staff see figures, never the content. Cancelling goes through
cancel_batch, which audits it.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from asgiref.sync import sync_to_async
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.utils.cache import add_never_cache_headers
from django.views.decorators.http import require_safe

from fairness.actions.batches import cancel_batch
from fairness.batch.control import CANCELLABLE
from fairness.batch.progress import Progress, progress_by_batch
from fairness.batch.stored_content import StoredContent
from fairness.models import Batch, BatchFile, BatchStatus
from fairness.portal.pages.common import page_actor, staff_required
from fairness.portal.signed_in import SignedInRequest
from fairness.telemetry.queue_state import wait_in_words

if TYPE_CHECKING:
    from django.contrib.auth.models import User

log = logging.getLogger(__name__)

PAGE_SIZE = 50
# The API's statuses in words a researcher reads, and the badge each wears.
STATUS_WORDS: dict[str, tuple[str, str]] = {
    BatchStatus.VALIDATING: ("checking its file", ""),
    BatchStatus.IN_PROGRESS: ("running", "warn"),
    BatchStatus.FINALIZING: ("writing its results", "warn"),
    BatchStatus.COMPLETED: ("finished", "ok"),
    BatchStatus.FAILED: ("failed", "bad"),
    BatchStatus.EXPIRED: ("ran out of time", "bad"),
    BatchStatus.CANCELLING: ("being cancelled", ""),
    BatchStatus.CANCELLED: ("cancelled", ""),
}


def _status_words(batch: Batch) -> str:
    return STATUS_WORDS.get(batch.status, (batch.status, ""))[0]


@dataclass(frozen=True)
class BatchRow:
    batch: Batch
    progress: Progress

    @property
    def status_words(self) -> str:
        return _status_words(self.batch)

    @property
    def status_badge(self) -> str:
        return STATUS_WORDS.get(self.batch.status, ("", ""))[1]

    @property
    def cancellable(self) -> bool:
        return self.batch.status in CANCELLABLE

    @property
    def time_left(self) -> str:
        """Like "about 4 min left"; "" once nothing more will run."""
        if self.batch.finished or self.batch.status == BatchStatus.CANCELLING or not self.progress.total:
            return ""
        seconds = self.progress.seconds_left
        if seconds is None:
            return "time left not known yet"
        if seconds <= 0:
            return "almost done"
        return f"{wait_in_words(seconds)} left"

    @property
    def done_width(self) -> str:
        return self._width(self.progress.done)

    @property
    def failed_width(self) -> str:
        return self._width(self.progress.failed)

    def _width(self, lines: int) -> str:
        return f"{100 * lines / self.progress.total:.1f}%" if self.progress.total else "0%"

    @property
    def error_messages(self) -> list[str]:
        """Why a batch failed as a whole, from OpenAI's errors list (its first few)."""
        errors: Any = self.batch.errors
        data = errors.get("data") if isinstance(errors, dict) else errors
        if not isinstance(data, list):
            return []
        return [str(e["message"]) for e in data if isinstance(e, dict) and e.get("message")][:3]


def _rows(batches: list[Batch], now: dt.datetime) -> list[BatchRow]:
    progress = progress_by_batch(batches, now)
    return [BatchRow(b, progress[b.pk]) for b in batches]


def _listing(request: HttpRequest, batches: QuerySet[Batch], template: str) -> HttpResponse:
    page = Paginator(batches, PAGE_SIZE).get_page(request.GET.get("page"))
    return render(request, template, {"page": page, "rows": _rows(list(page.object_list), timezone.now())})


def _cancel(request: SignedInRequest, batch: Batch, listing: str, whose: str) -> HttpResponse:
    """The confirmation on GET, the cancel on POST; a batch past cancelling is told so, not changed."""
    if batch.status not in CANCELLABLE:  # a second click, or a stale tab
        messages.info(request, f"{batch.public_id} is {_status_words(batch)}: nothing to cancel.")
        return redirect(listing)
    if request.method == "POST":
        if cancel_batch(page_actor(request), batch):
            messages.success(request, f"Cancelling {batch.public_id}{whose}: requests still running stop, no more "
                                      "start, and what finished stays in its results.")
        else:  # it changed between the check above and now
            messages.info(request, f"{batch.public_id} is {_status_words(batch)}: nothing to cancel.")
        return redirect(listing)
    return render(request, "staff/batches_cancel.html", {
        "row": _rows([batch], timezone.now())[0], "back": listing, "whose": whose,
    })


# -- a researcher's own -------------------------------------------------------------------------

def _get_batches_for_user(user: User) -> QuerySet[Batch]:
    return Batch.objects.of_owner(user.pk).select_related("output_file", "error_file")


def _get_batch_for_user(user: User, public_id: str) -> Batch:
    """Only the user's own batch; anyone else's is not found, like one that does not exist."""
    return get_object_or_404(_get_batches_for_user(user).select_related("owner", "api_key"), public_id=public_id)


def _get_file_for_user(user: User, public_id: str) -> BatchFile:
    return get_object_or_404(BatchFile.objects.of_owner(user.pk), public_id=public_id)


@login_required
@require_safe
def my_batches(request: SignedInRequest) -> HttpResponse:
    return _listing(request, _get_batches_for_user(request.user), "me/batches.html")


@login_required
def my_cancel(request: SignedInRequest, public_id: str) -> HttpResponse:
    return _cancel(request, _get_batch_for_user(request.user, public_id), "me-batches", "")


@login_required
@require_safe
async def my_file_content(request: HttpRequest, public_id: str) -> HttpResponse | StreamingHttpResponse:
    """A file of one's own, streamed from the batch-file storage as /v1/files/{id}/content does."""
    user: User = await request.auser()  # type: ignore[assignment]  # signed in: login_required
    row = await sync_to_async(_get_file_for_user)(user, public_id)
    await sync_to_async(BatchFile.objects.filter(pk=row.pk).touch)()  # retention counts from here
    try:
        content = await StoredContent.open(row.stored_name)
    except OSError:
        log.exception("could not read the stored content of %s", row.public_id)
        return HttpResponse("The portal could not read the file; try again later.", status=503,
                            content_type="text/plain; charset=utf-8", headers={"Retry-After": "30"})
    response = StreamingHttpResponse(content, content_type="application/octet-stream")
    # A length, so a download cut short is seen as such.
    response["Content-Length"] = str(row.bytes)
    response["Content-Disposition"] = f'attachment; filename="{row.public_id}.jsonl"'
    add_never_cache_headers(response)  # someone's own results: no shared cache keeps them
    return response


# -- staff ----------------------------------------------------------------------------------------

def _get_batch_for_staff(user: User, public_id: str) -> Batch:
    # Behind staff_required already; repeated so the helper is safe wherever it is called.
    if not (user.is_active and user.is_staff):
        raise Http404
    return get_object_or_404(Batch.objects.select_related("owner", "api_key"), public_id=public_id)


@staff_required
@require_safe
def staff_batches(request: SignedInRequest) -> HttpResponse:
    # No files here: a batch's results are its owner's to read.
    return _listing(request, Batch.objects.select_related("owner", "api_key"), "staff/batches.html")


@staff_required
def staff_cancel(request: SignedInRequest, public_id: str) -> HttpResponse:
    batch = _get_batch_for_staff(request.user, public_id)
    return _cancel(request, batch, "staff-batches", f" of {batch.owner.get_username()}")
