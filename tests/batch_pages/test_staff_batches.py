"""/staff/batches/: everyone's batches, a confirmed and audited cancel, and no one else's files."""

from __future__ import annotations

import pytest
from django.test import Client

from fairness.models import ApiKey, AuditEntry, Batch, BatchStatus
from tests.support.batch_rows import carol_key, make_batch, stored_file
from tests.support.cast import STAFF_IP

pytestmark = pytest.mark.django_db(transaction=True)


def test_researchers_are_refused_and_visitors_sent_to_sign_in(researcher_client, cast):
    batch = make_batch(carol_key(cast), pending=2)
    for path in ("/staff/batches/", f"/staff/batches/{batch.public_id}/cancel/"):
        assert researcher_client.get(path).status_code == 403
        anonymous = Client().get(path)
        assert anonymous.status_code == 302 and anonymous["Location"].startswith("/accounts/login/")
    assert researcher_client.post(f"/staff/batches/{batch.public_id}/cancel/").status_code == 403
    batch.refresh_from_db()
    assert batch.status == BatchStatus.IN_PROGRESS


def test_staff_see_everyones_batches_with_owner_key_and_progress(staff_client, cast):
    carols = make_batch(carol_key(cast), done=120, failed=3, pending=377, lately=60)
    alice_key = ApiKey.objects.get(pk=cast["alice"].key_id)
    alices = make_batch(alice_key, BatchStatus.VALIDATING)

    html = staff_client.get("/staff/batches/").content.decode()

    for batch, owner, key in ((carols, "carol", carol_key(cast)), (alices, "alice", alice_key)):
        assert batch.public_id in html and f"<td>{owner}<div" in html and f"{key.prefix}…" in html
    assert "120 done, 3 failed of 500" in html and "about 31 min left" in html
    assert "checking its file" in html and "No requests counted yet" in html
    assert f'href="/staff/batches/{carols.public_id}/cancel/"' in html
    assert 'href="/staff/batches/"' in staff_client.get("/staff/").content.decode()


def test_staff_get_no_link_to_anyones_files(staff_client, cast):
    key = carol_key(cast)
    output = stored_file(key.owner_id, b'{"custom_id": "req-0"}\n')
    make_batch(key, BatchStatus.COMPLETED, done=1, output_file=output)

    html = staff_client.get("/staff/batches/").content.decode()

    assert "/me/files/" not in html and output.public_id not in html
    assert staff_client.get(f"/me/files/{output.public_id}/content").status_code == 404


def test_staff_cancel_after_confirming_and_it_is_audited(staff, staff_client, cast):
    batch = make_batch(carol_key(cast), done=3, pending=5)
    url = f"/staff/batches/{batch.public_id}/cancel/"

    confirm = staff_client.get(url).content.decode()
    assert "Cancel batch" in confirm and "Made by carol" in confirm and "3 done, 0 failed of 8" in confirm
    batch.refresh_from_db()
    assert batch.status == BatchStatus.IN_PROGRESS

    done = staff_client.post(url, follow=True)

    batch.refresh_from_db()
    assert batch.status == BatchStatus.CANCELLING
    assert done.redirect_chain == [("/staff/batches/", 302)]
    assert f"Cancelling {batch.public_id} of carol" in done.content.decode()
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.target, entry.actor, entry.ip) == ("batch.cancel", batch.public_id, staff, STAFF_IP)
    assert entry.detail == {"owner": "carol", "key": carol_key(cast).prefix}
    assert "batch.cancel" in staff_client.get("/staff/audit/").content.decode()


def test_cancelling_twice_cancels_once(staff_client, cast):
    batch = make_batch(carol_key(cast), pending=5)
    url = f"/staff/batches/{batch.public_id}/cancel/"
    staff_client.post(url)
    first = Batch.objects.get(pk=batch.pk).cancelling_at

    again = staff_client.post(url, follow=True)

    assert "being cancelled: nothing to cancel" in again.content.decode()
    assert Batch.objects.get(pk=batch.pk).cancelling_at == first
    assert AuditEntry.objects.filter(action="batch.cancel").count() == 1


@pytest.mark.parametrize("status", [BatchStatus.COMPLETED, BatchStatus.FINALIZING, BatchStatus.CANCELLED,
                                    BatchStatus.EXPIRED, BatchStatus.FAILED])
def test_cancelling_a_batch_past_cancelling_changes_nothing(staff_client, cast, status):
    batch = make_batch(carol_key(cast), status, done=4)
    before = Batch.objects.filter(pk=batch.pk).values().get()

    response = staff_client.post(f"/staff/batches/{batch.public_id}/cancel/", follow=True)

    assert response.redirect_chain == [("/staff/batches/", 302)]
    assert "nothing to cancel" in response.content.decode()
    assert Batch.objects.filter(pk=batch.pk).values().get() == before
    assert not AuditEntry.objects.exists()
    assert f"/staff/batches/{batch.public_id}/cancel/" not in staff_client.get("/staff/batches/").content.decode()


def test_an_unknown_batch_is_not_found(staff_client, cast):
    assert staff_client.get("/staff/batches/batch_nothing/cancel/").status_code == 404
    assert staff_client.post("/staff/batches/batch_nothing/cancel/").status_code == 404


def test_the_cancel_form_needs_its_csrf_token(staff, cast):
    batch = make_batch(carol_key(cast), pending=5)
    client = Client(enforce_csrf_checks=True)
    client.force_login(staff)
    assert client.post(f"/staff/batches/{batch.public_id}/cancel/").status_code == 403
    batch.refresh_from_db()
    assert batch.status == BatchStatus.IN_PROGRESS
