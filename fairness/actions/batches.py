"""Batches and their storage: staff's audited cancelling and freeing."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.db import transaction

from fairness.actions.audit import Actor, audit
from fairness.batch import control as batch_control
from fairness.batch import retention
from fairness.models import Batch

if TYPE_CHECKING:
    from django.contrib.auth.models import User


@transaction.atomic
def cancel_batch(actor: Actor, batch: Batch) -> bool:
    """Its owner or staff stop a batch: its runner finishes it as cancelled with what it has done.
    False, and nothing audited, when it was past cancelling already (finishing, ended, or being
    cancelled by a click before this one)."""
    cancelled = batch_control.cancel(batch)
    if cancelled:
        audit(actor, "batch.cancel", batch.public_id, owner=batch.owner.get_username(), key=batch.api_key.prefix)
    return cancelled


@transaction.atomic
def free_storage(actor: Actor, owner: User) -> retention.Freed:
    """Staff delete one person's ended batches and their files that no unfinished batch needs.
    The audit says how much, never what the files held."""
    freed = retention.free_person(owner.pk)
    audit(actor, "storage.free", owner.get_username(), batches=freed.batches, files=freed.files, bytes=freed.bytes)
    return freed
