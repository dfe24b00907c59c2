"""Keys about to expire: one e-mail per key to its owner (on an injected clock), and the lists on
/me/ and the staff home."""

from __future__ import annotations

import datetime as dt

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.utils import timezone

from fairness.accounting import key_expiry
from fairness.actions.audit import Actor
from fairness.actions.keys import rotate
from fairness.models import ApiKey, Tier
from fairness.telemetry import tasks

pytestmark = pytest.mark.django_db(transaction=True)
User = get_user_model()
NOW = dt.datetime(2026, 12, 1, 9, 0, tzinfo=dt.UTC)


@pytest.fixture
def key(cast) -> ApiKey:
    """alice's key, expiring in three days; alice has an address."""
    User.objects.filter(username="alice").update(email="alice@example.org")
    ApiKey.objects.filter(pk=cast["alice"].key_id).update(expires_at=NOW + dt.timedelta(days=3), label="laptop")
    return ApiKey.objects.get(pk=cast["alice"].key_id)


def test_the_owner_gets_one_mail_per_key(key, mailoutbox):
    assert key_expiry.notify_expiring(NOW) == 1
    assert key_expiry.notify_expiring(NOW + dt.timedelta(hours=1)) == 0
    assert key_expiry.notify_expiring(NOW + dt.timedelta(days=2)) == 0
    [mail] = mailoutbox
    assert mail.to == ["alice@example.org"]
    assert mail.subject == f"gpuportal: your key {key.prefix}… expires on 2026-12-04"
    assert f"Your key {key.prefix}… (“laptop”), tier interactive, stops working at 2026-12-04 09:00 UTC" in mail.body
    assert "/me/keys/" in mail.body
    key.refresh_from_db()
    assert key.expiry_noticed_at == NOW


def test_a_key_is_mailed_only_once_its_week_begins(key, mailoutbox):
    ApiKey.objects.filter(pk=key.pk).update(expires_at=NOW + dt.timedelta(days=10))
    assert key_expiry.notify_expiring(NOW) == 0
    assert key_expiry.notify_expiring(NOW + dt.timedelta(days=3, hours=1)) == 1
    assert len(mailoutbox) == 1


def test_a_key_whose_expiry_moves_is_mailed_again_before_its_new_date(key, mailoutbox):
    assert key_expiry.notify_expiring(NOW) == 1
    ApiKey.objects.filter(pk=key.pk).update(expires_at=NOW + dt.timedelta(days=60))
    assert key_expiry.notify_expiring(NOW + dt.timedelta(days=1)) == 0
    assert key_expiry.notify_expiring(NOW + dt.timedelta(days=55)) == 1
    assert len(mailoutbox) == 2


def test_no_mail_for_revoked_rotated_or_unreachable_keys(key, cast, mailoutbox):
    User.objects.filter(username="bob").update(email="")  # no address: mailed once one is set
    ApiKey.objects.filter(pk=cast["bob"].key_id).update(expires_at=NOW + dt.timedelta(days=1))
    User.objects.filter(username="carol").update(email="carol@example.org", is_active=False)
    ApiKey.objects.filter(pk=cast["carol"].key_id).update(expires_at=NOW + dt.timedelta(days=1))
    key.revoke()
    assert key_expiry.notify_expiring(NOW) == 0

    ApiKey.objects.filter(pk=key.pk).update(revoked_at=None)
    new, _ = rotate(Actor(None, name="test"), ApiKey.objects.get(pk=key.pk), grace_seconds=3600)
    assert key_expiry.notify_expiring(NOW) == 1  # the successor (same expiry), not the old key in its grace
    assert new.prefix in mailoutbox[-1].subject and len(mailoutbox) == 1

    User.objects.filter(username="bob").update(email="bob@example.org")
    assert key_expiry.notify_expiring(NOW) == 1
    assert mailoutbox[-1].to == ["bob@example.org"]


def test_a_mail_that_fails_is_tried_again_next_time(key, mailoutbox, monkeypatch):
    def down(*args, **kwargs):
        raise ConnectionRefusedError("no mail server")

    monkeypatch.setattr(key_expiry, "send_mail", down)
    assert key_expiry.notify_expiring(NOW) == 0
    key.refresh_from_db()
    assert key.expiry_noticed_at is None
    monkeypatch.undo()
    assert key_expiry.notify_expiring(NOW) == 1 and len(mailoutbox) == 1


def test_the_task_runs_hourly():
    schedule = settings.CELERY_BEAT_SCHEDULE["notify-expiring-keys"]
    assert schedule == {"task": "fairness.notify_expiring_keys", "schedule": 3600.0}
    assert tasks.notify_expiring_keys.name == "fairness.notify_expiring_keys"


def test_me_and_the_staff_home_list_keys_expiring_within_a_week(cast, staff_client):
    soon = timezone.now() + dt.timedelta(days=2)
    ApiKey.objects.filter(pk=cast["alice"].key_id).update(expires_at=soon)
    later = ApiKey.objects.get(pk=cast["alice"].key_id)
    from tests.support.key_forms import signed_in

    alice = signed_in("alice")
    page = alice.get("/me/").content.decode()
    assert "Keys expiring within 7 days" in page and f"<code>{later.prefix}…</code>" in page
    assert later.prefix in staff_client.get("/staff/").content.decode()

    ApiKey.objects.filter(pk=cast["alice"].key_id).update(expires_at=timezone.now() + dt.timedelta(days=30))
    assert "Keys expiring within 7 days" not in alice.get("/me/").content.decode()
    assert Tier.objects.exists()
