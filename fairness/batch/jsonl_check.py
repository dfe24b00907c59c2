"""Is an upload JSONL text? Checked piece by piece as it streams in, so nothing is read twice.

Enough to refuse what is plainly not a batch input (a binary, a spreadsheet, one pretty-printed
JSON document) with a clear 400: the whole file is UTF-8 without NUL bytes, and its first line is
a JSON object. Whether every line is a valid request is the batch's to say, line by line.
"""

from __future__ import annotations

import codecs
import json

from django.conf import settings

from fairness.gateway.errors import ApiError


def _invalid(message: str) -> ApiError:
    return ApiError(400, message, "invalid_file_format", param="file")


class JsonlCheck:
    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")()
        self._first_line: list[str] | None = []  # None once the first line was checked
        self._first_line_chars = 0
        self.received = 0

    def feed(self, data: bytes) -> None:
        """Check the next piece; ApiError 400 when the file cannot be JSONL text."""
        try:
            text = self._decoder.decode(data)
        except UnicodeDecodeError:
            raise _invalid(
                f"The file is not UTF-8 text (after byte {self.received}): a batch file is JSONL, one JSON "
                "request per line."
            ) from None
        self.received += len(data)
        if "\x00" in text:
            raise _invalid("The file holds NUL bytes: a batch file is JSONL text, one JSON request per line.")
        if self._first_line is not None:
            line, newline, _ = text.partition("\n")
            self._first_line.append(line)
            self._first_line_chars += len(line)
            if newline:
                self._check_first_line()
            elif self._first_line_chars > settings.GP_MAX_BODY_BYTES:
                raise _invalid("The file's first line is longer than any request the gateway takes.")

    def finish(self) -> None:
        """The file is whole: check what is left."""
        try:
            self._decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            raise _invalid("The file ends within a UTF-8 character: a batch file is JSONL text.") from None
        if self.received == 0:
            raise _invalid("The file is empty: a batch file holds one JSON request per line.")
        if self._first_line is not None:
            self._check_first_line()

    def _check_first_line(self) -> None:
        assert self._first_line is not None
        line = "".join(self._first_line).strip()
        self._first_line = None
        try:
            parsed = json.loads(line)
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict):
            raise _invalid(
                "The file's first line is not a JSON object: a batch file is JSONL, one JSON request per line."
            )
