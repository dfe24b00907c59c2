from __future__ import annotations

from dataclasses import dataclass

import pytest

from tests.people.openwebui import SECRET


@dataclass(frozen=True)
class FrontEndKey:
    secret: str  # the API key Open WebUI is configured with
    key_id: int
    account_id: int


@pytest.fixture
def front_end_key(cast, tiers) -> FrontEndKey:
    """Open WebUI's key for the lab: a service user's, in the interactive tier, signing its
    forwarded users with SECRET."""
    from django.contrib.auth import get_user_model

    from fairness.actions.keys import issue_key
    from fairness.gateway.front_end_secrets import seal
    from fairness.models import Account, ApiKey, Membership

    lab = Account.objects.create(name="lab")
    service = get_user_model().objects.create(username="openwebui-service")
    membership = Membership.objects.create(account=lab, user=service, is_default=True)
    key, secret = issue_key(service, tiers["interactive"], label="Open WebUI", membership=membership)
    ApiKey.objects.filter(pk=key.pk).update(front_end="openwebui", front_end_secret=seal(SECRET))
    ApiKey.objects.get(pk=key.pk).save()  # bump the config epoch, as every staff change does
    return FrontEndKey(secret, key.pk, lab.pk)


@pytest.fixture
def slow_engine():
    """An engine slow enough that a long stream outlasts any test's look at it (about 40 s)."""
    from enginesim.process import start_enginesim
    from tests.support.cast import MODEL

    process = start_enginesim(model=MODEL, max_num_seqs=8, extra_args=["--speed", "1"])
    yield process
    process.stop()
