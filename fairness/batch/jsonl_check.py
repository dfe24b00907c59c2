"""Is an upload JSONL text? Checked piece by piece as it streams in, so nothing is read twice.

Enough to refuse what is plainly not a batch input (a binary, a spreadsheet, one pretty-printed
JSON document, a line no request could fill) with a clear 400 that names the line: the whole file
is UTF-8 without NUL bytes, no line is longer than GP_BATCH_MAX_LINE_BYTES, and its first line is
a JSON object. Whether every line is a valid request is the batch's to say, line by line.
"""

from __future__ import annotations

import codecs

from django.conf import settings

from fairness.batch import line_json
from fairness.batch.line_json import LineRefused
from fairness.gateway.errors import ApiError
from fairness.gateway.streamed_body import mebibytes

JSONL = "a batch file is JSONL, one JSON request per line."


def _invalid(message: str) -> ApiError:
    return ApiError(400, message, "invalid_file_format", param="file")


class JsonlCheck:
    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")()
        self._first_line: list[bytes] | None = []  # None once the first line was checked
        self._line = 1  # the line being received
        self._line_bytes = 0  # of it so far
        self.received = 0

    def feed(self, data: bytes) -> None:
        """Check the next piece; ApiError 400 when the file cannot be JSONL text."""
        pending = len(self._decoder.getstate()[0])  # bytes of a character cut at the last piece's end
        try:
            text = self._decoder.decode(data)
        except UnicodeDecodeError as exc:
            line = self._line + data[: max(0, exc.start - pending)].count(b"\n")
            raise _invalid(f"Line {line} of the file is not UTF-8 text: {JSONL}") from None
        self.received += len(data)
        if "\x00" in text:
            line = self._line + text[: text.index("\x00")].count("\n")
            raise _invalid(f"Line {line} of the file holds NUL bytes: {JSONL}")
        if self._first_line is not None:
            first, _, _ = data.partition(b"\n")
            self._first_line.append(first)
        self._measure(data)
        if self._first_line is not None and self._line > 1:
            self._check_first_line()

    def finish(self) -> None:
        """The file is whole: check what is left."""
        try:
            self._decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            raise _invalid(f"Line {self._line} of the file ends within a UTF-8 character: {JSONL}") from None
        if self.received == 0:
            raise _invalid("The file is empty: a batch file holds one JSON request per line.")
        if self._first_line is not None:
            self._check_first_line()

    def _measure(self, data: bytes) -> None:
        """Count the lines, and refuse one longer than any request."""
        limit = settings.GP_BATCH_MAX_LINE_BYTES
        newlines = data.count(b"\n")
        if self._line_bytes + len(data) - newlines > limit:  # else no line here can be too long
            lengths = [len(piece) for piece in data.split(b"\n")]
            lengths[0] += self._line_bytes
            for offset, length in enumerate(lengths):
                if length > limit:
                    raise _invalid(f"Line {self._line + offset} of the file is longer than {mebibytes(limit)} "
                                   f"(GP_BATCH_MAX_LINE_BYTES), more than any request the gateway takes.")
        self._line_bytes = self._line_bytes + len(data) if not newlines else len(data) - data.rindex(b"\n") - 1
        self._line += newlines

    def _check_first_line(self) -> None:
        assert self._first_line is not None
        line = b"".join(self._first_line).strip()
        self._first_line = None
        try:
            parsed = line_json.loads(line)
        except LineRefused as refused:
            raise _invalid(f"Line 1 of the file is not a request: {refused.message} {JSONL.capitalize()}") from None
        if not isinstance(parsed, dict):
            raise _invalid(f"Line 1 of the file is not a JSON object: {JSONL}")
