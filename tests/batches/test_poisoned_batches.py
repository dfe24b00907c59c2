"""A batch file made to break the runner breaks only its own lines, and a batch that fails in the
portal fails alone: another person's batch, run by the same runner in the same slices, finishes
meanwhile. Through the real path: uploads and batches by the SDK, a Celery worker running them."""

from __future__ import annotations

import json

from django.contrib.auth import get_user_model
from django.core.files.base import ContentFile

from fairness.batch.storage_writer import batch_storage
from fairness.models import BatchFile
from tests.support.batches import chat_lines, output_lines, wait_for_status

ENDED = {"completed", "failed", "expired", "cancelled"}
OTHER_BATCH_TIMEOUT = 30.0  # it takes a second or two; the poisoned batch held it for as long as it ran


def request_line(custom_id: str, body: object) -> bytes:
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions", "body": body}).encode()


# Nested 100,000 deep: the standard library's parser raised RecursionError, which ended every slice
# of the runner that read it.
DEEP = b'{"custom_id": "deep", "method": "POST", "url": "/v1/chat/completions", "body": ' + b"[" * 100_000 \
    + b"]" * 100_000 + b"}"


def huge() -> bytes:
    """100 MB in one line (made when the test runs, not when the module is collected)."""
    return request_line("huge", {"model": "sim", "messages": [{"role": "user", "content": "x" * 100 * 1024 * 1024}]})


BAD_UTF8 = request_line("bad-utf8", {"model": "sim", "messages": [{"role": "user", "content": "ab"}]}).replace(
    b"ab", b"a\xff\xfeb")


def start(client, file_id: str):
    return client.batches.create(input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h")


def stored_for(member, content: bytes) -> str:
    """A batch file put in storage as it is, not through an upload (whose checks refuse some of
    these lines now): one kept from before those checks, or stored under larger limits."""
    owner = get_user_model().objects.get(username=member.username)
    row = BatchFile.objects.create(
        public_id="file-stored-as-it-is", owner=owner, uploaded_with_id=member.key_id, purpose="batch",
        filename="old.jsonl", bytes=len(content), stored_name=batch_storage().save("old.jsonl", ContentFile(content)),
    )
    return row.public_id


def codes(client, batch) -> list[tuple[str, str]]:
    return [(e["custom_id"], e["error"]["code"]) for e in output_lines(client, batch.error_file_id)]


def test_a_poisoned_batch_fails_only_its_bad_lines_while_another_person_s_batch_finishes(openai_for, cast, runner):
    carol, alice = openai_for(cast["carol"]), openai_for(cast["alice"])
    good = chat_lines(4, prefix="carol").splitlines()
    uploaded = carol.files.create(file=("poisoned.jsonl", b"\n".join([
        good[0], DEEP, request_line("text-body", "a request"), b'["a", "line"]', good[1],
    ]) + b"\n"), purpose="batch")
    old_file = stored_for(cast["carol"], b"\n".join([good[2], huge(), BAD_UTF8, good[3]]) + b"\n")
    poisoned = [start(carol, uploaded.id), start(carol, old_file)]
    other = start(alice, alice.files.create(file=("in.jsonl", chat_lines(5)), purpose="batch").id)

    done = wait_for_status(alice, other.id, ENDED, timeout=OTHER_BATCH_TIMEOUT)
    assert done.status == "completed", done
    assert (done.request_counts.total, done.request_counts.completed, done.request_counts.failed) == (5, 5, 0)

    first, second = (wait_for_status(carol, batch.id, ENDED) for batch in poisoned)
    assert (first.status, first.request_counts.completed, first.request_counts.failed) == ("completed", 2, 3)
    assert codes(carol, first) == [("", "line_too_deep"), ("text-body", "invalid_body"), ("", "invalid_request")]
    assert sorted(r["custom_id"] for r in output_lines(carol, first.output_file_id)) == ["carol-0", "carol-1"]
    assert (second.status, second.request_counts.completed, second.request_counts.failed) == ("completed", 2, 2)
    assert codes(carol, second) == [("", "line_too_large"), ("", "invalid_utf8")]
    assert sorted(r["custom_id"] for r in output_lines(carol, second.output_file_id)) == ["carol-2", "carol-3"]


def test_a_batch_the_portal_fails_ends_failed_saying_why_and_the_others_go_on(openai_for, cast, runner,
                                                                              stored_files):
    carol, alice = openai_for(cast["carol"]), openai_for(cast["alice"])
    uploaded = carol.files.create(file=("in.jsonl", chat_lines(3)), purpose="batch")
    stored_name = BatchFile.objects.get(public_id=uploaded.id).stored_name
    (stored_files / stored_name).unlink()  # its content lost from storage, its row kept: reading it raises
    broken = start(carol, uploaded.id)
    other = start(alice, alice.files.create(file=("in.jsonl", chat_lines(5)), purpose="batch").id)

    done = wait_for_status(alice, other.id, ENDED, timeout=OTHER_BATCH_TIMEOUT)
    assert (done.status, done.request_counts.completed) == ("completed", 5), done

    failed = wait_for_status(carol, broken.id, ENDED)
    assert failed.status == "failed", failed
    [error] = failed.errors.data
    assert error.code == "batch_failed" and error.message == "The portal could not read this batch's input file."
    assert f"batch {broken.id} failed; it ends" in runner.log_tail(400)  # the cause is in the log, not in the batch
