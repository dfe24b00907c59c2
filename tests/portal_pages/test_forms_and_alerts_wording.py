"""How the forms and the alerts page read: labels without colons, whole seconds as whole numbers,
no Markdown in help, engine priority explained, a sensible default tier; resolved alerts offer no
Acknowledge, and no two alerts share an accessible name."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.utils import timezone

from fairness.models import ApiKey, AuditEntry, Replica, SaturationAlert

pytestmark = pytest.mark.django_db(transaction=True)

FORMS = ["/staff/keys/issue/", "/staff/keys/{prefix}/rotate/", "/staff/users/new/", "/staff/tiers/new/",
         "/staff/tiers/batch/edit/", "/staff/replicas/new/", "/staff/replicas/gpu0/edit/", "/staff/tokens/issue/",
         "/accounts/password/"]


@pytest.fixture
def prefix(cast) -> str:
    Replica.objects.create(name="gpu0", base_url="http://127.11.2.3:9", model="m")
    return ApiKey.objects.get(pk=cast["bob"].key_id).prefix


@pytest.mark.parametrize("path", FORMS)
def test_labels_end_without_a_colon_and_help_has_no_markdown(staff_client, prefix, path):
    html = staff_client.get(path.format(prefix=prefix)).content.decode()
    labels = re.findall(r"<label[^>]*>(.*?)</label>", html, re.S)
    assert labels, path
    assert not [label for label in labels if label.strip().endswith(":")], path
    helps = re.findall(r'<div class="helptext"[^>]*>(.*?)</div>', html, re.S)
    assert not [text for text in helps if "`" in text], path


def test_whole_seconds_show_as_whole_numbers_and_priority_is_explained(staff_client, tiers):
    html = staff_client.get("/staff/tiers/interactive/edit/").content.decode()
    assert re.search(r'name="head_start_seconds" value="600"', html)
    assert re.search(r'name="max_queue_wait_seconds" value="\d+"', html)
    assert "600.0" not in html
    assert "Engine priority (lower runs first)" in html and "Lower runs first" in html
    assert "lower runs first" in staff_client.get("/staff/tiers/").content.decode()


def test_a_new_key_defaults_to_the_owners_tier_or_interactive(staff_client, cast):
    def selected(path: str) -> list[str]:
        html = staff_client.get(path).content.decode()
        select = html[html.index('name="tier"'):]
        select = select[:select.index("</select>")]
        assert "---------" not in select  # no empty choice to fall back on
        return re.findall(r'<option value="([^"]+)" selected>', select)

    assert selected("/staff/keys/issue/?owner=carol") == ["batch"]
    assert selected("/staff/keys/issue/?owner=alice") == ["interactive"]
    assert selected("/staff/keys/issue/") == ["interactive"]


def test_resolved_alerts_offer_no_acknowledge_and_alerts_have_names_of_their_own(staff_client, tiers):
    now = timezone.now()
    open_ones = [SaturationAlert.objects.create(model="tiny", kind="queue", opened_at=now, figures={})
                 for _ in range(2)]  # the same model, kind and minute
    resolved = SaturationAlert.objects.create(model="tiny", kind="queue", opened_at=now - dt.timedelta(hours=1),
                                              resolved_at=now, figures={})
    html = staff_client.get("/staff/alerts/").content.decode()
    assert f'action="/staff/alerts/{resolved.pk}/acknowledge/"' not in html
    for alert in open_ones:
        assert f'action="/staff/alerts/{alert.pk}/acknowledge/"' in html
    headings = re.findall(r'<h2 id="alert-\d+">(.*?)</h2>', html, re.S)
    buttons = re.findall(r'<button type="submit" class="button small"[^>]*>(.*?)</button>', html, re.S)
    plain = [re.sub(r"<[^>]+>", "", text) for text in headings + buttons]
    assert len(headings) == 3 and len(buttons) == 2 and len(set(plain)) == len(plain)

    # A stale tab's Acknowledge of a resolved alert changes nothing.
    response = staff_client.post(f"/staff/alerts/{resolved.pk}/acknowledge/", follow=True)
    assert "Resolved already" in response.content.decode()
    resolved.refresh_from_db()
    assert resolved.acknowledged_at is None and not AuditEntry.objects.filter(action="alert.acknowledge").exists()
