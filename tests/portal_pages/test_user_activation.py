"""Deactivating a user in one step (their keys stop at once), reactivating, the rule on who may,
and one's own password change."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from fairness.models import AuditEntry, UsageHourly
from fairness.store.keyspace import CONFIG_EPOCH
from tests.support.cast import STAFF_IP

pytestmark = pytest.mark.django_db(transaction=True)
User = get_user_model()


def test_deactivating_is_one_post_that_stops_their_keys_and_is_audited(staff_client, cast, redis_client):
    redis_client.set(CONFIG_EPOCH, "before")
    response = staff_client.post("/staff/users/alice/deactivate/", follow=True)
    assert "Deactivated alice" in response.content.decode()
    assert not User.objects.get(username="alice").is_active
    # The epoch bump is what makes every gateway drop its cached keys (tests/keys/test_inactive_owner.py
    # shows a live gateway refusing within a second once it moves).
    assert redis_client.get(CONFIG_EPOCH) != b"before"
    entry = AuditEntry.objects.get(action="user.deactivate")
    assert (entry.target, entry.actor_name, entry.ip) == ("alice", "sam", STAFF_IP)
    html = staff_client.get("/staff/users/").content.decode()
    assert 'action="/staff/users/alice/reactivate/"' in html and "deactivated" in html

    staff_client.post("/staff/users/alice/reactivate/")
    assert User.objects.get(username="alice").is_active
    assert AuditEntry.objects.filter(action="user.reactivate", target="alice").count() == 1


def test_a_deactivated_researcher_is_signed_out(staff_client, researcher_client, cast):
    assert researcher_client.get("/me/").status_code == 200
    staff_client.post("/staff/users/alice/deactivate/")
    response = researcher_client.get("/me/")
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


def test_staff_cannot_switch_off_staff_or_themselves_but_a_superuser_can(staff, staff_client, cast):
    User.objects.create_user("tess", is_staff=True)
    boss = User.objects.create_superuser("boss", password="the boss's long password")
    html = staff_client.get("/staff/users/").content.decode()
    assert 'action="/staff/users/tess/deactivate/"' not in html  # not offered
    assert 'action="/staff/users/sam/deactivate/"' not in html

    for target, why in (("tess", "Only a superuser may"), ("boss", "Only a superuser may"),
                        ("sam", "cannot deactivate or reactivate yourself")):
        response = staff_client.post(f"/staff/users/{target}/deactivate/", follow=True)
        assert why in response.content.decode()
        assert User.objects.get(username=target).is_active, target
    assert AuditEntry.objects.filter(action="user.activation.refused").count() == 3
    assert not AuditEntry.objects.filter(action="user.deactivate").exists()

    superuser = Client()
    superuser.force_login(boss)
    superuser.post("/staff/users/tess/deactivate/")
    assert not User.objects.get(username="tess").is_active
    superuser.post("/staff/users/boss/deactivate/")
    assert User.objects.get(username="boss").is_active  # not even a superuser switches themselves off


def test_each_row_links_to_the_users_keys_and_shows_their_usage(staff_client, cast):
    from django.utils import timezone

    from fairness.models import ApiKey

    key = ApiKey.objects.get(pk=cast["carol"].key_id)
    UsageHourly.objects.create(key=key, hour=timezone.now().replace(minute=0, second=0, microsecond=0),
                               requests=2, prompt_tokens=5000, completion_tokens=678)
    html = staff_client.get("/staff/users/").content.decode()
    assert 'href="/staff/keys/?q=carol&amp;state=all"' in html
    assert "5,678" in html


def test_everyone_changes_their_own_password(researcher_client, cast):
    page = researcher_client.get("/accounts/password/").content.decode()
    assert 'for="id_old_password">Old password</label>' in page  # no trailing colon
    wrong = researcher_client.post("/accounts/password/", {
        "old_password": "not it", "new_password1": "a brand new long phrase",
        "new_password2": "a brand new long phrase",
    })
    assert wrong.status_code == 200
    alice = User.objects.get(username="alice")
    alice.set_password("alice's long password")
    alice.save()
    researcher_client.force_login(alice)
    done = researcher_client.post("/accounts/password/", {
        "old_password": "alice's long password", "new_password1": "a brand new long phrase",
        "new_password2": "a brand new long phrase",
    }, follow=True)
    assert done.redirect_chain[-1][0] == "/accounts/password/done/"
    assert "Password changed" in done.content.decode()
    assert researcher_client.get("/me/").status_code == 200  # still signed in here
    assert User.objects.get(username="alice").check_password("a brand new long phrase")
    entry = AuditEntry.objects.get(action="user.password.own")
    assert entry.target == "alice" and "a brand new" not in str(entry.detail)
    anonymous = Client().get("/accounts/password/")
    assert anonymous.status_code == 302 and anonymous["Location"].startswith("/accounts/login/")
