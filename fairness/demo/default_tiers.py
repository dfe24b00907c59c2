"""The two tiers every installation starts with (seed: "interactive keys get a concurrency of
two each, batch keys get two total and are told to expect queueing")."""

from __future__ import annotations

from typing import Any

DEFAULT_TIERS: list[dict[str, Any]] = [
    {
        "name": "interactive",
        "description": "People at a keyboard: answered first.",
        "per_key_concurrency": 2,
        "pool_concurrency": None,
        "head_start_seconds": 600.0,
        "max_queue_wait_seconds": 120.0,
        "max_queued_per_key": 16,
        "engine_priority": 0,
        "borrow_idle_slots": False,
    },
    {
        "name": "batch",
        "description": "Jobs nobody watches: expect queueing.",
        "per_key_concurrency": 2,
        "pool_concurrency": 2,
        "head_start_seconds": 0.0,
        "max_queue_wait_seconds": 3600.0,
        "max_queued_per_key": 1024,
        # Half of GP_MAX_QUEUED_TOTAL's default: a batch job never fills the queue for everyone.
        "max_queued": 256,
        "engine_priority": 10,
        "borrow_idle_slots": True,
    },
]


def ensure_default_tiers(tier_model: Any) -> dict[str, Any]:
    """Create the default tiers if missing (existing ones keep their edits). `tier_model` may be a
    migration's, which lacks the fields added later: those are left to their own migrations."""
    known = {field.name for field in tier_model._meta.get_fields()}
    return {
        fields["name"]: tier_model.objects.get_or_create(
            name=fields["name"], defaults={name: value for name, value in fields.items() if name in known}
        )[0]
        for fields in DEFAULT_TIERS
    }
