"""The official openai SDK drives the Files API end to end against a live gateway."""

from __future__ import annotations

import io

import httpx
import pytest
from django.contrib.auth import get_user_model

from fairness.actions.keys import issue_key
from fairness.models import BatchFile
from tests.support.batch_files import files_on_disk, jsonl
from tests.support.cast import Member


def test_a_file_goes_up_is_listed_read_back_and_deleted(openai_for, cast, stored_files):
    client = openai_for(cast["alice"])
    content = jsonl(5)
    created = client.files.create(file=("requests.jsonl", io.BytesIO(content)), purpose="batch")

    assert created.id.startswith("file-") and len(created.id) > 20
    assert (created.object, created.purpose, created.filename, created.bytes) == (
        "file", "batch", "requests.jsonl", len(content))
    assert created.status == "processed" and created.created_at > 0
    assert [f.id for f in client.files.list()] == [created.id]
    assert client.files.retrieve(created.id) == created
    assert client.files.content(created.id).read() == content
    stored = files_on_disk(stored_files)
    assert len(stored) == 1 and stored[0].read_bytes() == content
    assert "requests" not in stored[0].name  # never the client's name

    deleted = client.files.delete(created.id)
    assert (deleted.id, deleted.deleted, deleted.object) == (created.id, True, "file")
    assert list(client.files.list()) == []
    assert files_on_disk(stored_files) == []
    assert not BatchFile.objects.exists()


def test_any_key_its_owner_made_reads_the_file(openai_for, cast, tiers):
    alice = get_user_model().objects.get(username="alice")
    _, second_secret = issue_key(alice, tiers["batch"], label="alice's batch key", created_by=alice)
    created = openai_for(cast["alice"]).files.create(file=("a.jsonl", jsonl()), purpose="batch")

    other_key = openai_for(Member("alice", "batch", second_secret, 0))
    assert other_key.files.retrieve(created.id).id == created.id
    assert other_key.files.content(created.id).read() == jsonl()
    assert BatchFile.objects.get().uploaded_with_id == cast["alice"].key_id


def test_the_list_pages_with_limit_after_and_order(openai_for, cast):
    client = openai_for(cast["alice"])
    ids = [client.files.create(file=(f"{n}.jsonl", jsonl()), purpose="batch").id for n in range(4)]

    first = client.files.list(limit=3)
    assert [f.id for f in first.data] == ids[::-1][:3] and first.has_more
    page = first._get_page_items()
    assert first.model_dump()["first_id"] == page[0].id and first.model_dump()["last_id"] == page[-1].id
    assert [f.id for f in client.files.list(limit=3)] == ids[::-1]  # the SDK follows `after`
    assert [f.id for f in client.files.list(order="asc", limit=2)] == ids
    second = client.files.list(order="asc", limit=2, after=ids[1])
    assert [f.id for f in second.data] == ids[2:] and not second.has_more
    assert list(client.files.list(purpose="batch_output")) == []
    empty = client.files.list(purpose="batch_output")
    assert empty.model_dump()["first_id"] is None and empty.has_more is False


@pytest.mark.parametrize("query", ["limit=0", "limit=10001", "limit=x", "order=sideways", "after=file-nope"])
def test_bad_list_parameters_are_400(gateway, cast, query):
    response = httpx.get(f"{gateway.url}/v1/files?{query}", headers={"authorization": f"Bearer {cast['alice'].secret}"})
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == query.split("=")[0]
