"""The staff storage page: what each person's batch files hold against their quota, and a button
to free one person's space at once (their ended batches and the files no unfinished batch
needs), through free_storage, which audits it. Staff see names and sizes, never content.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.db.models import Count
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template.defaultfilters import filesizeformat
from django.views.decorators.http import require_safe

from fairness.actions.audit import Actor
from fairness.actions.batches import free_storage
from fairness.batch import retention
from fairness.models import Batch, BatchFile
from fairness.portal.client_address import client_address
from fairness.portal.pages.common import staff_required
from fairness.portal.signed_in import SignedInRequest

if TYPE_CHECKING:
    from django.contrib.auth.models import User

LISTED_FILES = 200  # the free page names this many of a person's files, largest first


@dataclass(frozen=True)
class PersonStorage:
    username: str
    files: int
    bytes: int
    ended_batches: int

    @property
    def quota_percent(self) -> int:
        return min(100, round(100 * self.bytes / settings.GP_STORAGE_QUOTA_BYTES_PER_USER))


def _people() -> list[PersonStorage]:
    files = {row["username"]: row for row in BatchFile.objects.storage_by_owner()}
    ended = {
        row["owner__username"]: row["n"]
        for row in Batch.objects.exclude(status__in=Batch.UNFINISHED).order_by().values("owner__username")
        .annotate(n=Count("pk"))
    }
    none = {"files": 0, "bytes": 0}
    rows = [
        PersonStorage(name, files.get(name, none)["files"], files.get(name, none)["bytes"], ended.get(name, 0))
        for name in files.keys() | ended.keys()
    ]
    return sorted(rows, key=lambda row: (-row.bytes, row.username))


@staff_required
@require_safe
def storage(request: SignedInRequest) -> HttpResponse:
    return render(request, "staff/storage.html", {
        "people": _people(), "quota": settings.GP_STORAGE_QUOTA_BYTES_PER_USER,
        "retention_days": settings.GP_FILE_RETENTION_DAYS,
    })


def _get_person_for_staff(username: str) -> User:
    return get_object_or_404(get_user_model(), username=username)


@staff_required
def free(request: SignedInRequest, username: str) -> HttpResponse:
    """The confirmation, naming what would go, on GET; the deletion on POST."""
    owner = _get_person_for_staff(username)
    if request.method == "POST":
        freed = free_storage(Actor(request.user, client_address(request)), owner)
        messages.success(request, f"Freed {filesizeformat(freed.bytes)} of {username}'s: {freed.files} files and "
                                  f"{freed.batches} ended batches deleted.")
        return redirect("staff-storage")
    files = BatchFile.objects.of_owner(owner.pk).order_by("-bytes", "-id")
    return render(request, "staff/storage_free.html", {
        "owner": owner, "files": files[:LISTED_FILES], "more": max(0, files.count() - LISTED_FILES),
        "kept": retention.needed_by_unfinished(owner.pk),
    })
