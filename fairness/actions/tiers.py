"""Tiers: staff's audited changes."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from fairness.actions.audit import Actor, audit, jsonable
from fairness.models import Tier


@transaction.atomic
def save_tier(actor: Actor, tier: Tier, changed: dict[str, Any]) -> Tier:
    """`tier` already validated (full_clean) by the caller."""
    creating = tier.pk is None
    tier.save()
    audit(actor, "tier.create" if creating else "tier.update", tier.name, **jsonable(changed))
    return tier
