"""Staff read nobody's files: a key staff issued in a researcher's name (staff saw its secret)
reaches only the files and batches it brought in itself; the keys the researcher made reach all
of theirs."""

from __future__ import annotations

import openai
import pytest
from django.contrib.auth import get_user_model

from fairness.actions.keys import issue_key
from fairness.models import Tier
from tests.support.batch_files import jsonl
from tests.support.cast import Member


@pytest.fixture
def alices_keys(cast, staff):
    """alice's own key (she made it on /me/keys/) and one staff issued for her."""
    alice = get_user_model().objects.get(username="alice")
    interactive = Tier.objects.get(name="interactive")
    _, own = issue_key(alice, interactive, label="made by alice", created_by=alice)
    _, issued = issue_key(alice, interactive, label="issued by staff", created_by=staff)
    return own, issued


def test_a_key_staff_issued_cannot_reach_the_files_and_batches_alice_made(openai_for, cast, alices_keys):
    own_secret, issued_secret = alices_keys
    own, issued = (openai_for(Member("alice", "interactive", secret, 0)) for secret in (own_secret, issued_secret))
    mine = own.files.create(file=("private.jsonl", jsonl()), purpose="batch")
    batch = own.batches.create(input_file_id=mine.id, endpoint="/v1/chat/completions", completion_window="24h")

    assert list(issued.files.list()) == [] and list(issued.batches.list()) == []
    for attempt in (issued.files.retrieve, issued.files.content, issued.files.delete):
        with pytest.raises(openai.NotFoundError) as refused:
            attempt(mine.id)
        assert refused.value.body["code"] == "file_not_found"
    for call in (issued.batches.retrieve, issued.batches.cancel):
        with pytest.raises(openai.NotFoundError) as refused:
            call(batch.id)
        assert refused.value.body["code"] == "batch_not_found"
    with pytest.raises(openai.NotFoundError) as refused:
        issued.batches.create(input_file_id=mine.id, endpoint="/v1/chat/completions", completion_window="24h")
    assert refused.value.body["code"] == "file_not_found"

    assert own.files.content(mine.id).read() == jsonl()  # still there, and hers
    assert own.batches.retrieve(batch.id).status == "validating"


def test_a_key_staff_issued_reaches_what_it_brought_in_and_so_does_its_owner(openai_for, cast, alices_keys):
    own_secret, issued_secret = alices_keys
    own, issued = (openai_for(Member("alice", "interactive", secret, 0)) for secret in (own_secret, issued_secret))
    theirs = issued.files.create(file=("sent.jsonl", jsonl(2)), purpose="batch")
    assert [row.id for row in issued.files.list()] == [theirs.id]
    assert issued.files.content(theirs.id).read() == jsonl(2)
    assert own.files.content(theirs.id).read() == jsonl(2)  # everything of hers is alice's to read
    with pytest.raises(openai.NotFoundError):  # and only hers
        openai_for(cast["bob"]).files.retrieve(theirs.id)
