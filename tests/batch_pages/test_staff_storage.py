"""/staff/storage/: staff see what each person's files hold, by name and size, never their content,
and free one person's space at once (audited): their ended batches and every file no running
batch needs go, content included."""

from __future__ import annotations

from django.contrib.auth import get_user_model

from fairness.models import AuditEntry, Batch, BatchFile, BatchLine, BatchStatus
from tests.support.batch_files import files_on_disk
from tests.support.batch_rows import carol_key, make_batch, stored_file
from tests.support.cast import STAFF_IP

SECRET = b'{"custom_id": "secret-prompt", "body": {"messages": [{"content": "the unpublished result"}]}}\n'


def carols_storage(cast):
    key = carol_key(cast)
    results = stored_file(key.owner_id, SECRET * 100)
    ended = make_batch(key, BatchStatus.COMPLETED, done=2, output_file=results)
    still_read = stored_file(key.owner_id, SECRET, purpose="batch")
    running = make_batch(key, BatchStatus.IN_PROGRESS, pending=2, input_file=still_read)
    return results, ended, still_read, running


def test_staff_see_each_persons_files_and_bytes_but_never_their_content(staff_client, cast):
    results, _, still_read, _ = carols_storage(cast)
    stored_file(get_user_model().objects.get(username="alice").pk, b"{}\n")

    page = staff_client.get("/staff/storage/")
    assert page.status_code == 200
    body = page.content.decode()
    assert 'id="storage-carol"' in body and 'id="storage-alice"' in body
    assert f'data-bytes="{results.bytes + still_read.bytes}"' in body
    assert body.index("storage-carol") < body.index("storage-alice")  # the most bytes first

    confirm = staff_client.get("/staff/storage/carol/free/")
    assert confirm.status_code == 200
    text = confirm.content.decode()
    assert results.public_id in text and results.filename in text and still_read.public_id in text
    assert "kept: a running batch reads it" in text
    assert b"secret-prompt" not in page.content + confirm.content
    assert b"unpublished" not in page.content + confirm.content


def test_freeing_deletes_ended_batches_and_unneeded_files_and_is_audited(staff_client, cast, stored_files):
    results, ended, still_read, running = carols_storage(cast)
    alices = stored_file(get_user_model().objects.get(username="alice").pk, b"{}\n")
    assert len(files_on_disk(stored_files)) == 3

    response = staff_client.post("/staff/storage/carol/free/")

    assert response.status_code == 302 and response.url == "/staff/storage/"
    assert set(Batch.objects.values_list("pk", flat=True)) == {running.pk}
    assert not BatchLine.objects.filter(batch_id=ended.pk).exists()
    assert set(BatchFile.objects.values_list("pk", flat=True)) == {still_read.pk, alices.pk}
    assert len(files_on_disk(stored_files)) == 2
    entry = AuditEntry.objects.get(action="storage.free")
    assert entry.target == "carol" and entry.actor_name == "sam" and entry.ip == STAFF_IP
    assert entry.detail == {"batches": 1, "files": 1, "bytes": results.bytes}


def test_researchers_cannot_see_or_free_anyones_storage(researcher_client, cast, stored_files):
    carols_storage(cast)
    assert researcher_client.get("/staff/storage/").status_code == 403
    assert researcher_client.post("/staff/storage/carol/free/").status_code == 403
    assert BatchFile.objects.count() == 2 and Batch.objects.count() == 2
    assert not AuditEntry.objects.filter(action="storage.free").exists()


def test_a_username_with_a_slash_is_listed_and_freed(staff_client, tiers, stored_files):
    # Usernames made before names were checked (an SSO claim taken as it came) may hold a "/".
    owner = get_user_model().objects.create_user("lab/alice")
    stored_file(owner.pk, b"{}\n", purpose="batch")
    page = staff_client.get("/staff/storage/")
    assert page.status_code == 200 and b'href="/staff/storage/lab/alice/free/"' in page.content
    assert staff_client.get("/staff/storage/lab/alice/free/").status_code == 200
    assert staff_client.post("/staff/storage/lab/alice/free/").status_code == 302
    assert not BatchFile.objects.exists() and files_on_disk(stored_files) == []
