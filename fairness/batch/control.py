"""What people do to a batch besides creating it: cancel it."""

from __future__ import annotations

from django.utils import timezone

from fairness.models import Batch, BatchStatus

CANCELLABLE = (BatchStatus.VALIDATING, BatchStatus.IN_PROGRESS)


def cancel(batch: Batch) -> bool:
    """Ask the batch's runner to stop: status `cancelling`, and the runner aborts its lines in
    flight, starts no more and finalizes it as `cancelled` with what it finished. False (and
    nothing changes) when the batch is past cancelling: finalizing, or already ended."""
    now = timezone.now()
    changed = Batch.objects.filter(pk=batch.pk, status__in=CANCELLABLE).update(
        status=BatchStatus.CANCELLING, cancelling_at=now
    )
    batch.refresh_from_db()
    return bool(changed)
