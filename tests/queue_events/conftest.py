"""The queue's live tests: a person in a wide tier, and the shared engine as a replica of two slots."""

from __future__ import annotations

import pytest

from tests.support.cast import MODEL


@pytest.fixture
def lab(tiers):
    """A tier whose keys run up to 20 at once, and a person in it."""
    from django.contrib.auth import get_user_model

    from fairness.actions.keys import issue_key
    from fairness.models import Tier

    tier = Tier.objects.create(name="lab", per_key_concurrency=20, max_queued_per_key=64)
    user = get_user_model().objects.create(username="lena")
    _, secret = issue_key(user, tier, label="lena's key")
    return user, tier, secret


@pytest.fixture
def two_slots(sim, gateway):
    """The shared engine as a replica of two slots, its faults reset."""
    from fairness.models import Replica

    sim.set_faults(health_fail=False, error_500=False, stall=False, error_500_marker="")
    return Replica.objects.create(name="sim-a", base_url=sim.url, model=MODEL, max_num_seqs=2)
