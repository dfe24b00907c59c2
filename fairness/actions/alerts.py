"""Alerts: acknowledging one, audited."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from fairness.actions.audit import Actor, audit
from fairness.models import SaturationAlert


@transaction.atomic
def acknowledge(actor: Actor, alert: SaturationAlert) -> SaturationAlert:
    if alert.acknowledged_at is None:
        alert.acknowledged_at = timezone.now()
        alert.acknowledged_by = actor.user
        alert.save(update_fields=["acknowledged_at", "acknowledged_by"])
        audit(actor, "alert.acknowledge", f"{alert.model}/{alert.kind}", alert=alert.pk)
    return alert
