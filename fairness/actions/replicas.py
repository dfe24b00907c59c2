"""Replicas: staff's audited adds, edits, states and deletions."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from fairness.actions.audit import Actor, audit, jsonable
from fairness.gateway.replica_rows import conflict_if_saved
from fairness.models import Replica, Tier


@transaction.atomic
def save_replica(actor: Actor, replica: Replica, changed: dict[str, Any],
                 tiers: Iterable[Tier] | None = None) -> Replica:
    """`replica` already validated (full_clean) by the caller; `tiers` None keeps the ones it has.

    The replica and its tiers are one change: a gateway reloads after both, never in between
    (a new replica with no tiers yet would serve every tier), and a failure leaves neither.
    Raises ValidationError when the deployments would overlap (see replica_rows.py).
    """
    tiers = None if tiers is None else list(tiers)
    conflict = conflict_if_saved(replica, None if tiers is None else frozenset(t.name for t in tiers))
    if conflict:
        raise ValidationError({"tiers": conflict})
    creating = replica.pk is None
    replica.save()
    detail = {k: v for k, v in jsonable(changed).items() if k != "api_key"}  # never log a secret
    if tiers is not None:
        replica.tiers.set(tiers)
        detail["tiers"] = sorted(t.name for t in tiers)
    audit(actor, "replica.create" if creating else "replica.update", replica.name, **detail)
    return replica


@transaction.atomic
def set_replica_state(actor: Actor, replica: Replica, state: str) -> Replica:
    """enable, disable, or drain (finish in-flight, accept nothing new).

    Raises ValidationError when enabling it would make deployments overlap (see replicas.py).
    """
    if state != "disable" and not replica.enabled:
        replica.enabled = True
        conflict = conflict_if_saved(replica)
        if conflict:
            replica.enabled = False
            raise ValidationError(conflict)
    replica.enabled = state != "disable"
    replica.draining = state == "drain"
    replica.save(update_fields=["enabled", "draining"])
    audit(actor, f"replica.{state}", replica.name)
    return replica


@transaction.atomic
def delete_replica(actor: Actor, replica: Replica) -> None:
    """Gateways stop routing to it at their next reload; its samples go with it."""
    name, url = replica.name, replica.base_url
    replica.delete()
    audit(actor, "replica.delete", name, base_url=url)
