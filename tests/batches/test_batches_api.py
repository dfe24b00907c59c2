"""/v1/batches' answers: what a create checks at once, lists and pages, another person's batch
is nobody's, a cancel of an ended batch."""

from __future__ import annotations

import httpx
import openai
import pytest
from django.contrib.auth import get_user_model

from fairness.actions.keys import issue_key
from fairness.models import Batch, BatchFile
from tests.support.batches import chat_lines
from tests.support.cast import Member


def upload(client, content: bytes = b"", purpose: str = "batch") -> str:
    return client.files.create(file=("in.jsonl", content or chat_lines(2)), purpose=purpose).id


def create(client, **fields):
    return client.batches.create(**{"endpoint": "/v1/chat/completions", "completion_window": "24h", **fields})


@pytest.mark.parametrize(("fields", "param"), [
    ({"endpoint": "/v1/moderations"}, "endpoint"),
    ({"completion_window": "1h"}, "completion_window"),
    ({"metadata": {"k": "v" * 513}}, "metadata"),
    ({"metadata": {f"k{n}": "v" for n in range(17)}}, "metadata"),
])
def test_a_create_with_a_bad_field_is_400_naming_it(openai_for, cast, fields, param):
    client = openai_for(cast["carol"])
    with pytest.raises(openai.BadRequestError) as caught:
        create(client, input_file_id=upload(client), **fields)
    assert caught.value.body["param"] == param
    assert not Batch.objects.exists()


def test_a_create_without_a_json_object_or_input_file_is_400(gateway, cast, replica):
    headers = {"Authorization": f"Bearer {cast['carol'].secret}"}
    for body in (b"[1]", b"nope", b'{"endpoint": "/v1/chat/completions", "completion_window": "24h"}'):
        answer = httpx.post(gateway.url + "/v1/batches", content=body, headers=headers)
        assert answer.status_code == 400 and answer.json()["error"]["type"] == "invalid_request_error"


def test_an_input_file_of_another_purpose_is_400(openai_for, cast, batch_files_dir):
    client = openai_for(cast["carol"])
    file_id = upload(client)
    BatchFile.objects.filter(public_id=file_id).update(purpose="batch_output")
    with pytest.raises(openai.BadRequestError, match="purpose 'batch'"):
        create(client, input_file_id=file_id)


def test_another_person_s_file_and_batch_are_404_to_them(openai_for, cast):
    carol, alice = openai_for(cast["carol"]), openai_for(cast["alice"])
    file_id = upload(carol)
    with pytest.raises(openai.NotFoundError):
        create(alice, input_file_id=file_id)  # alice cannot start a batch on carol's file
    batch = create(carol, input_file_id=file_id)

    with pytest.raises(openai.NotFoundError):
        alice.batches.retrieve(batch.id)
    with pytest.raises(openai.NotFoundError):
        alice.batches.cancel(batch.id)
    assert list(alice.batches.list()) == []
    assert Batch.objects.get().status == "validating"  # alice's cancel did nothing


def test_any_key_its_owner_made_sees_the_batch(openai_for, cast, tiers):
    carol = get_user_model().objects.get(username="carol")
    _, secret = issue_key(carol, tiers["interactive"], label="carol's chat key", created_by=carol)
    batch = create(openai_for(cast["carol"]), input_file_id=upload(openai_for(cast["carol"])))
    assert openai_for(Member("carol", "interactive", secret, 0)).batches.retrieve(batch.id).id == batch.id


def test_the_list_pages_newest_first(openai_for, cast):
    client = openai_for(cast["carol"])
    file_id = upload(client)
    ids = [create(client, input_file_id=file_id).id for _ in range(3)]

    first = client.batches.list(limit=2)
    assert [b.id for b in first.data] == ids[::-1][:2] and first.has_more
    assert [b.id for b in client.batches.list(limit=2)] == ids[::-1]  # the SDK follows `after`
    with pytest.raises(openai.BadRequestError):
        client.batches.list(limit=101)
    with pytest.raises(openai.BadRequestError):
        client.batches.list(after="batch_nope")


def test_unfinished_batches_per_person_are_capped(openai_for, cast, settings):
    client = openai_for(cast["carol"])
    file_id = upload(client)
    Batch.objects.bulk_create(
        Batch(public_id=f"batch_{n}", owner=get_user_model().objects.get(username="carol"),
              api_key_id=cast["carol"].key_id, input_file_public_id=file_id, endpoint="/v1/chat/completions",
              expires_at="2100-01-01T00:00:00Z")
        for n in range(10)
    )
    with pytest.raises(openai.RateLimitError, match="still running"):
        create(client, input_file_id=file_id)


def test_an_ended_batch_cannot_be_cancelled(openai_for, cast):
    client = openai_for(cast["carol"])
    batch = create(client, input_file_id=upload(client))
    Batch.objects.filter(public_id=batch.id).update(status="completed")
    with pytest.raises(openai.ConflictError, match="completed"):
        client.batches.cancel(batch.id)


def test_methods_and_paths_that_are_not_the_api_are_refused(gateway, cast, replica):
    headers = {"Authorization": f"Bearer {cast['carol'].secret}"}
    assert httpx.delete(gateway.url + "/v1/batches", headers=headers).status_code == 405
    assert httpx.get(gateway.url + "/v1/batches/batch_x/cancel", headers=headers).status_code == 405
    assert httpx.get(gateway.url + "/v1/batches/batch_x/other", headers=headers).status_code == 404
    assert httpx.get(gateway.url + "/v1/batches").status_code == 401
