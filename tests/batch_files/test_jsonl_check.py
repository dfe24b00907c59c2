"""The upload's JSONL check names the line at fault, however the upload is cut into chunks."""

from __future__ import annotations

import pytest

from fairness.batch.jsonl_check import JsonlCheck
from fairness.gateway.errors import ApiError

LINE = b'{"custom_id": "a", "body": {"model": "sim"}}\n'


def check(content: bytes, chunk_size: int) -> None:
    checked = JsonlCheck()
    for start in range(0, len(content), chunk_size):
        checked.feed(content[start:start + chunk_size])
    checked.finish()


@pytest.mark.parametrize("chunk_size", [1, 2, 3, 7, 64, 10_000])
@pytest.mark.parametrize(
    ("content", "said"),
    [
        (LINE * 2 + b'{"custom_id": "\xc3\xa9\xff"}\n' + LINE, "Line 3 of the file is not UTF-8 text"),
        (LINE + b"\x00\n", "Line 2 of the file holds NUL bytes"),
        (LINE * 3 + b"x" * 101 + b"\n" + LINE, "Line 4 of the file is longer than"),
        (LINE + b"x" * 101, "Line 2 of the file is longer than"),
        (LINE * 2 + b'{"a": "\xe2\x82', "Line 3 of the file ends within a UTF-8 character"),
        (b"[" * 2000 + b"]" * 2000 + b"\n", "Line 1 of the file is not a request: This line is nested more than 254"),
    ],
    ids=["bad-utf-8", "nul", "too-long", "too-long-last", "cut-character", "deep"],
)
def test_the_line_at_fault_is_named(settings, content, said, chunk_size):
    settings.GP_BATCH_MAX_LINE_BYTES = 100 if b"x" * 101 in content else 10_000
    with pytest.raises(ApiError) as refused:
        check(content, chunk_size)
    assert refused.value.status == 400 and refused.value.message.startswith(said), refused.value.message


@pytest.mark.parametrize("chunk_size", [1, 5, 100, 10_000])
def test_lines_up_to_the_limit_pass(settings, chunk_size):
    settings.GP_BATCH_MAX_LINE_BYTES = 100
    check(LINE + (b"y" * 100 + b"\n") * 3 + b"y" * 100, chunk_size)
