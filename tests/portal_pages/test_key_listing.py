"""The keys page: search, filters, sorting by any column, pages of 50, live figures, and a key in
its rotation grace period marked with the time it ends and offering no second Rotate."""

from __future__ import annotations

import datetime as dt

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from fairness.actions.audit import Actor
from fairness.actions.keys import issue_key, revoke, rotate
from fairness.models import ApiKey, AuditEntry
from fairness.portal.reports.queries import KEY_SORTS
from fairness.store.keyspace import ADMISSION_IN_FLIGHT_BY_KEY, ADMISSION_NAMESPACE, ADMISSION_QUEUED_BY_KEY
from tests.support.key_forms import key_form

# What admission counts per person (the list shows it live).
IN_FLIGHT = ADMISSION_NAMESPACE + ADMISSION_IN_FLIGHT_BY_KEY
QUEUED = ADMISSION_NAMESPACE + ADMISSION_QUEUED_BY_KEY

pytestmark = pytest.mark.django_db(transaction=True)


def prefixes(response) -> list[str]:
    return [row.key.prefix for row in response.context["rows"]]


def test_search_finds_owner_label_or_prefix(staff_client, cast):
    alice, carol = (ApiKey.objects.get(pk=cast[n].key_id) for n in ("alice", "carol"))
    assert prefixes(staff_client.get("/staff/keys/?q=ALI")) == [alice.prefix]
    assert prefixes(staff_client.get("/staff/keys/?q=carol's key")) == [carol.prefix]  # the label
    assert prefixes(staff_client.get(f"/staff/keys/?q={carol.prefix[3:9]}")) == [carol.prefix]
    nothing = staff_client.get("/staff/keys/?q=nobody")
    assert prefixes(nothing) == [] and "No key matches" in nothing.content.decode()


def test_filters_by_tier_and_state(staff, staff_client, cast):
    bob = ApiKey.objects.get(pk=cast["bob"].key_id)
    revoke(Actor(staff), bob)
    alice = ApiKey.objects.get(pk=cast["alice"].key_id)
    alice.expires_at = timezone.now() - dt.timedelta(minutes=1)
    alice.save()
    carol = ApiKey.objects.get(pk=cast["carol"].key_id)
    new_carol, _ = rotate(Actor(staff), carol, grace_seconds=3600)

    assert set(prefixes(staff_client.get("/staff/keys/?tier=batch&state=all"))) == {carol.prefix, new_carol.prefix}
    assert set(prefixes(staff_client.get("/staff/keys/"))) == {carol.prefix, new_carol.prefix}  # live
    assert prefixes(staff_client.get("/staff/keys/?state=revoked")) == [bob.prefix]
    assert prefixes(staff_client.get("/staff/keys/?state=expired")) == [alice.prefix]
    assert prefixes(staff_client.get("/staff/keys/?state=ending")) == [carol.prefix]
    assert len(prefixes(staff_client.get("/staff/keys/?state=all"))) == 4
    assert prefixes(staff_client.get("/staff/keys/?tier=interactive")) == []


def test_every_column_sorts_both_ways(staff_client, cast, redis_client):
    keys = {name: ApiKey.objects.get(pk=cast[name].key_id) for name in ("alice", "bob", "carol")}
    for n, name in enumerate(("carol", "alice", "bob")):  # created in another order than the names
        keys[name].created_at = timezone.now() - dt.timedelta(days=10 - n)
        keys[name].last_used_at = timezone.now() - dt.timedelta(hours=n + 1)
        keys[name].save()
    redis_client.hset(IN_FLIGHT, f"p{keys['bob'].owner_id}.{keys['bob'].tier.name}", 3)
    redis_client.hset(QUEUED, f"p{keys['alice'].owner_id}.{keys['alice'].tier.name}", 7)
    p = {name: key.prefix for name, key in keys.items()}

    assert prefixes(staff_client.get("/staff/keys/?sort=owner")) == [p["alice"], p["bob"], p["carol"]]
    assert prefixes(staff_client.get("/staff/keys/?sort=-owner")) == [p["carol"], p["bob"], p["alice"]]
    assert prefixes(staff_client.get("/staff/keys/?sort=created")) == [p["carol"], p["alice"], p["bob"]]
    assert prefixes(staff_client.get("/staff/keys/?sort=-last_used")) == [p["carol"], p["alice"], p["bob"]]
    assert prefixes(staff_client.get("/staff/keys/?sort=-in_flight"))[0] == p["bob"]
    assert prefixes(staff_client.get("/staff/keys/?sort=-queued"))[0] == p["alice"]
    assert prefixes(staff_client.get("/staff/keys/?sort=tier"))[0] == p["carol"]  # batch before interactive
    assert prefixes(staff_client.get("/staff/keys/?sort=-tier"))[-1] == p["carol"]
    for column in KEY_SORTS:  # every column, both ways: the same keys, in an order of their own
        for sort in (column, f"-{column}"):
            response = staff_client.get(f"/staff/keys/?sort={sort}")
            assert sorted(prefixes(response)) == sorted(p.values()), sort
    html = staff_client.get("/staff/keys/?sort=owner").content.decode()
    assert 'aria-sort="ascending"><a href="?sort=-owner">Owner' in html  # a second click reverses
    assert prefixes(staff_client.get("/staff/keys/?sort=nonsense"))[0] == p["bob"]  # the newest first


def test_pages_hold_fifty_keys_and_keep_the_filters(staff_client, cast, tiers):
    dave = get_user_model().objects.create_user("dave")
    for n in range(60):
        issue_key(dave, tiers["batch"], label=f"job {n}")
    first = staff_client.get("/staff/keys/?q=dave&sort=created")
    assert len(first.context["rows"]) == 50
    assert 'href="?q=dave&amp;sort=created&amp;page=2"' in first.content.decode()
    second = staff_client.get("/staff/keys/?q=dave&sort=created&page=2")
    assert [row.key.label for row in second.context["rows"]] == [f"job {n}" for n in range(50, 60)]


def test_live_figures_refresh_from_a_json_endpoint(staff_client, cast, redis_client):
    carol = ApiKey.objects.get(pk=cast["carol"].key_id)
    alice = ApiKey.objects.get(pk=cast["alice"].key_id)
    redis_client.hset(IN_FLIGHT, f"p{carol.owner_id}.{carol.tier.name}", 2)
    redis_client.hset(QUEUED, f"p{carol.owner_id}.{carol.tier.name}", 5)
    body = staff_client.get(f"/staff/keys/load.json?prefix={carol.prefix}&prefix={alice.prefix}").json()
    assert body == {"keys": {carol.prefix: {"in_flight": 2, "queued": 5},
                             alice.prefix: {"in_flight": 0, "queued": 0}}}
    html = staff_client.get("/staff/keys/").content.decode()
    assert 'data-load-url="/staff/keys/load.json"' in html and "js/staff_keys.js" in html


def test_a_key_in_its_grace_period_shows_when_it_ends_and_offers_no_second_rotate(staff_client, cast):
    old = ApiKey.objects.get(pk=cast["alice"].key_id)
    staff_client.post(f"/staff/keys/{old.prefix}/rotate/", key_form(grace_seconds=3600))
    old.refresh_from_db()

    html = staff_client.get("/staff/keys/").content.decode()
    assert "rotated: ends in 1 h" in html
    assert f"{old.expires_at:%Y-%m-%d %H:%M}" in html  # the time, not just the date
    assert f'href="/staff/keys/{old.prefix}/rotate/"' not in html
    assert f'href="/staff/keys/{old.prefix}/revoke/"' in html  # still revocable at once

    # A stale tab's second rotation makes nothing.
    again = staff_client.post(f"/staff/keys/{old.prefix}/rotate/", key_form(grace_seconds=3600), follow=True)
    assert "was rotated already" in again.content.decode()
    assert staff_client.get(f"/staff/keys/{old.prefix}/rotate/", follow=True).redirect_chain == [("/staff/keys/", 302)]
    assert ApiKey.objects.filter(owner=old.owner).count() == 2
    assert AuditEntry.objects.filter(action="key.rotate").count() == 1
