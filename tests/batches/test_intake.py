"""Reading a batch's input into lines: each bad line failed with its reason, the limits."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json

import pytest
from django.contrib.auth import get_user_model
from django.core.files.base import ContentFile
from django.utils import timezone

from fairness.batch.intake import model_refusal, take_in
from fairness.batch.line_check import BadLine, GoodLine, check_line
from fairness.batch.storage_writer import batch_storage
from fairness.gateway.api_keys import _key_info
from fairness.gateway.model_access import ModelAccess
from fairness.models import Batch, BatchFile, BatchLine
from fairness.scheduling.directory import ReplicaDirectory, ReplicaInfo

DIRECTORY = ReplicaDirectory([ReplicaInfo(1, "a", "http://127.0.0.1:1", "sim", "vllm", 8, False, "")])


def line(custom_id: str = "x", ensure_ascii: bool = False, **overrides) -> str:
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions",
                       "body": {"model": "sim", "messages": []}, **overrides}, ensure_ascii=ensure_ascii)


def nested(depth: int) -> list:
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


# A line nested 100,000 deep: the standard library's parser recursed once per level.
DEEP = '{"custom_id": "deep", "method": "POST", "url": "/v1/chat/completions", "body": ' + "[" * 100_000 \
    + "]" * 100_000 + "}"


def check(raw: str, seen: set[str] | None = None):
    return check_line(raw, "/v1/chat/completions", set() if seen is None else seen, lambda m: None, 1000)


@pytest.mark.parametrize(("raw", "code"), [
    ("{", "invalid_json_line"),
    ("[]", "invalid_request"),
    (line(""), "missing_custom_id"),
    (line(7), "missing_custom_id"),
    (line("x" * 513), "missing_custom_id"),
    (line(method="GET"), "invalid_method"),
    (line(url="/v1/completions"), "invalid_url"),
    (line(body=[]), "invalid_body"),
    (line(body={"messages": []}), "missing_model"),
    (line(body={"model": "sim", "stream": True}), "stream_not_supported"),
    (line(body={"model": "sim", "messages": [{"role": "user", "content": "x" * 2000}]}), "request_too_large"),
    (DEEP, "line_too_deep"),
    (line(body={"model": "sim", "messages": nested(300)}), "line_too_deep"),
    (line(body={"model": "sim", "messages": [{"role": "user", "content": "ab"}]}).replace("ab", "a\xff\xfeb").encode(
        "latin-1"), "invalid_utf8"),
    (line(body={"model": "sim", "messages": [{"role": "user", "content": "\ud800"}]}, ensure_ascii=True),
     "invalid_json_line"),
    (line(body="a request"), "invalid_body"),
    (line(body=5), "invalid_body"),
    (line("a\x00b"), "missing_custom_id"),
    (line(body={"model": "s\x00m"}), "missing_model"),
])
def test_a_bad_line_says_why(raw, code):
    checked = check(raw)
    assert isinstance(checked, BadLine) and checked.code == code and checked.message


def test_a_good_line_keeps_its_body_and_its_custom_id_is_taken():
    seen: set[str] = set()
    assert check(line("a"), seen) == GoodLine("a", '{"model":"sim","messages":[]}')
    assert check(line("a"), seen).code == "duplicate_custom_id"


def test_a_line_for_a_model_it_may_not_use_fails_with_the_code_a_live_call_gets(cast):
    carol = _key_info(pk=cast["carol"].key_id)  # the batch tier
    interactive_only = ReplicaDirectory([ReplicaInfo(1, "a", "http://127.0.0.1:1", "sim", "vllm", 8, False, "",
                                                     tiers=frozenset({"interactive"}))])
    restricted = dataclasses.replace(carol, model_access=ModelAccess((("its tier", frozenset({"other"})),)))
    for key, directory, model, code in [
        (carol, DIRECTORY, "gpt-9", "model_not_found"),  # a live call: 404
        (carol, interactive_only, "sim", "model_not_available_for_tier"),  # 403
        (restricted, DIRECTORY, "sim", "model_not_allowed"),  # 403
    ]:
        checked = check_line(line(body={"model": model, "messages": []}), "/v1/chat/completions", set(),
                             lambda m, k=key, d=directory: model_refusal(k, d, m), 1000)
        assert isinstance(checked, BadLine) and checked.code == code, (model, checked)


def make_batch(cast, content: bytes) -> Batch:
    name = batch_storage().save("in.jsonl", ContentFile(content))
    owner = get_user_model().objects.get(username="carol")
    file = BatchFile.objects.create(public_id="file-in", owner=owner, purpose="batch", filename="in.jsonl",
                                    bytes=len(content), stored_name=name)
    return Batch.objects.create(public_id="batch_in", owner=owner, api_key_id=cast["carol"].key_id, input_file=file,
                                input_file_public_id=file.public_id, endpoint="/v1/chat/completions",
                                expires_at=timezone.now() + dt.timedelta(hours=24))


def test_lines_are_read_in_order_bad_ones_failed_blank_ones_skipped(cast, stored_files):
    content = f"{line('a')}\n\n{{oops\n{line('b', body={'model': 'gpt-9', 'messages': []})}\n{line('c')}".encode()
    batch = make_batch(cast, content)

    take_in(batch, _key_info(pk=cast["carol"].key_id), DIRECTORY)
    batch.refresh_from_db()
    assert (batch.status, batch.total, batch.failed, batch.completed) == ("in_progress", 4, 2, 0)
    rows = list(BatchLine.objects.values_list("index", "custom_id", "state", "error_code"))
    assert rows == [(0, "a", "pending", ""), (1, "", "failed", "invalid_json_line"),
                    (2, "b", "failed", "model_not_found"), (3, "c", "pending", "")]


def test_a_line_longer_than_any_request_is_failed_without_being_held(cast, stored_files, settings):
    settings.GP_BATCH_MAX_LINE_BYTES = 1000
    batch = make_batch(cast, f"{line('a')}\n{'x' * 50_000}\n{line('b')}\n{'y' * 1000}\n".encode())
    take_in(batch, _key_info(pk=cast["carol"].key_id), DIRECTORY)
    rows = list(BatchLine.objects.values_list("custom_id", "state", "error_code"))
    assert rows == [("a", "pending", ""), ("", "failed", "line_too_large"), ("b", "pending", ""),
                    ("", "failed", "invalid_json_line")]


def test_more_lines_than_a_batch_may_hold_fail_the_batch(cast, stored_files, settings):
    settings.GP_MAX_BATCH_LINES = 3
    batch = make_batch(cast, "".join(line(str(n)) + "\n" for n in range(4)).encode())
    take_in(batch, _key_info(pk=cast["carol"].key_id), DIRECTORY)
    batch.refresh_from_db()
    assert batch.status == "failed" and batch.errors["data"][0]["code"] == "too_many_lines"
    assert not BatchLine.objects.exists()


def test_a_deleted_input_file_fails_the_batch(cast, stored_files):
    batch = make_batch(cast, (line("a") + "\n").encode())
    BatchFile.objects.all().delete()
    batch.refresh_from_db()
    take_in(batch, _key_info(pk=cast["carol"].key_id), DIRECTORY)
    batch.refresh_from_db()
    assert batch.status == "failed" and batch.errors["data"][0]["code"] == "input_file_missing"
