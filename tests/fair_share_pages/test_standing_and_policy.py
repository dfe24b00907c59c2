"""Where a researcher stands, on /me/, and the policy on the public capacity page: in words,
each with no one else's usage or name."""

from __future__ import annotations

import re

import pytest
from django.test import Client, override_settings

from fairness.models import Tier
from fairness.portal.reports.fair_share_words import half_life_in_words, policy_paragraph
from tests.support.accounts import charge

pytestmark = pytest.mark.django_db(transaction=True)


def standing_section(html: str) -> str:
    found = re.search(r'<section class="card" aria-labelledby="standing-heading">.*?</section>', html, re.S)
    assert found, "no 'Where you stand' section"
    return found.group(0)


def test_a_heavy_user_reads_how_far_over_their_share_they_are(researcher_client, tree):
    charge((tree.alice, 1000.0))
    section = standing_section(researcher_client.get("/me/").content.decode())
    assert ("In nlp you used 2.5× your share lately; your requests wait behind lighter users&#x27; until it "
            "decays") in section
    assert "counts half as much by" in section and "UTC" in section
    assert "In alice you have used nothing lately" in section  # her own account, no longer the default
    assert section.index("In nlp") < section.index("In alice")  # the default first


def test_the_sentences_tell_nothing_of_other_users(tree, cast):
    charge((tree.alice, 1000.0))
    from django.contrib.auth import get_user_model

    client = Client()
    client.force_login(get_user_model().objects.get(username="bob"))
    section = standing_section(client.get("/me/").content.decode())
    assert "In bob you have used nothing lately" in section
    for other in ("alice", "nlp", "lab", "carol", "1000", "2.5"):
        assert not re.search(rf"\b{re.escape(other)}\b", section), other


def test_the_capacity_page_explains_the_policy_without_names_or_usage(tree, cast):
    charge((tree.alice, 1000.0))
    html = Client().get("/capacity/").content.decode()
    found = re.search(r'<p id="fair-share-policy">(.*?)</p>', html, re.S)
    assert found
    policy = found.group(1)
    assert "halves in a week" in policy and "used less than their share lately go first" in policy
    assert "every wait stays bounded" in policy and "5 minutes" in policy  # the tiers' largest weight
    for private in ("alice", "bob", "carol", "nlp", "lab"):
        assert not re.search(rf"\b{private}\b", html), private


def test_the_policy_says_when_fair_share_is_off():
    assert "switched off in every tier" in policy_paragraph(0.0)
    assert "by at most 2 minutes" in policy_paragraph(120.0)


@pytest.mark.parametrize(("hours", "words"), [
    (168, "a week"), (336, "2 weeks"), (24, "a day"), (72, "3 days"), (12, "12 hours"), (1, "an hour"),
    (1.5, "1 hour 30 minutes"),
])
def test_the_half_life_reads_as_a_person_would_say_it(hours, words):
    assert half_life_in_words(hours) == words


@override_settings(GP_FAIRSHARE_HALF_LIFE_HOURS=24.0)
def test_the_pages_follow_the_half_life_setting(researcher_client, tree):
    Tier.objects.update(fairshare_weight_seconds=60)
    assert "halves in a day" in Client().get("/capacity/").content.decode()
    assert "counts half as much after a day" in researcher_client.get("/me/").content.decode()
