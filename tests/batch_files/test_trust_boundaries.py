"""A file is its owner's: another person's key gets 404 for it, exactly as for a file that never
existed, and a key that is no longer valid gets 401 before any of its upload is read."""

from __future__ import annotations

import openai
import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from fairness.models import ApiKey, BatchFile
from tests.batch_files.test_hostile_input import upload
from tests.support.batch_files import files_on_disk, jsonl


@pytest.fixture
def alices_file(openai_for, cast):
    return openai_for(cast["alice"]).files.create(file=("mine.jsonl", jsonl()), purpose="batch")


def test_bob_cannot_see_alices_file_in_any_way(openai_for, cast, alices_file, stored_files):
    bob = openai_for(cast["bob"])
    assert list(bob.files.list()) == []
    for attempt in (bob.files.retrieve, bob.files.content, bob.files.delete):
        with pytest.raises(openai.NotFoundError) as refused:
            attempt(alices_file.id)
        assert refused.value.body["code"] == "file_not_found"
        assert refused.value.body["message"] == f"No such File object: {alices_file.id}"
    # The same answer as for a file that never was.
    with pytest.raises(openai.NotFoundError) as never:
        bob.files.retrieve("file-" + "x" * 24)
    assert never.value.body["message"] == "No such File object: file-" + "x" * 24
    assert never.value.body["code"] == refused.value.body["code"]
    assert openai_for(cast["alice"]).files.content(alices_file.id).read() == jsonl()
    assert len(files_on_disk(stored_files)) == 1


def test_a_revoked_key_gets_401_for_every_call(openai_for, cast, alices_file):
    key = ApiKey.objects.get(pk=cast["alice"].key_id)
    key.revoked_at = timezone.now()
    key.save()  # the signal bumps the config epoch: the gateway drops its cached key
    alice = openai_for(cast["alice"])
    for call in (lambda: alice.files.create(file=("x.jsonl", jsonl()), purpose="batch"), alice.files.list,
                 lambda: alice.files.retrieve(alices_file.id), lambda: alice.files.content(alices_file.id),
                 lambda: alice.files.delete(alices_file.id)):
        with pytest.raises(openai.AuthenticationError) as refused:
            call()
        assert refused.value.body["code"] == "revoked_api_key"
    assert BatchFile.objects.count() == 1


def test_a_deactivated_owners_keys_get_401(openai_for, cast, alices_file):
    get_user_model().objects.filter(username="alice").update(is_active=False)
    ApiKey.objects.get(pk=cast["alice"].key_id).save()  # bump the config epoch
    with pytest.raises(openai.AuthenticationError) as refused:
        openai_for(cast["alice"]).files.retrieve(alices_file.id)
    assert refused.value.body["code"] == "owner_inactive"


def test_an_unknown_key_is_refused_before_its_upload_is_read(gateway, stored_files):
    response = upload(gateway, "gp-" + "A" * 40, jsonl())
    assert response.status_code == 401 and response.json()["error"]["code"] == "invalid_api_key"
    assert files_on_disk(stored_files) == []


def test_deleting_a_person_deletes_their_files_content(openai_for, cast, alices_file, stored_files):
    assert len(files_on_disk(stored_files)) == 1
    get_user_model().objects.filter(username="alice").delete()
    assert not BatchFile.objects.exists()
    assert files_on_disk(stored_files) == []
