"""The JSON of one batch line, read and written within bounds: whatever a line holds (nesting a
hundred thousand deep, bytes that are not UTF-8, a lone surrogate), reading it raises LineRefused
with a reason for the user, and nothing else.

orjson, not json: the standard library's parser recurses once per level of nesting, so a deep line
raised RecursionError (not the ValueError its callers caught) wherever it was read, the runner
included. orjson stops at 1024 levels without recursing further, and refuses what the gateway's own
parse of a live request refuses (gateway/request_parsing.py): invalid UTF-8, lone surrogates, NaN.
"""

from __future__ import annotations

from typing import Any

import orjson

MAX_DEPTH = 254  # orjson writes no deeper; a line it could read but not write back is refused too


class LineRefused(ValueError):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def too_deep() -> LineRefused:
    return LineRefused("line_too_deep", f"This line is nested more than {MAX_DEPTH} levels deep.")


def loads(raw: bytes | str) -> Any:
    """The line's value; LineRefused if it is not JSON text this portal can run."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        detail = str(exc)
    if "depth" in detail:
        raise too_deep()
    if "UTF-8" in detail:
        raise LineRefused("invalid_utf8", "This line is not UTF-8 text.")
    if "surrogate" in detail:
        raise LineRefused("invalid_json_line", "This line holds a lone UTF-16 surrogate (an unpaired "
                          "\\ud800-\\udfff escape), which is not text.")
    raise LineRefused("invalid_json_line", "This line is not valid JSON.")


def dumps(value: Any) -> str:
    """`value` as compact JSON text; LineRefused if it is nested too deeply to write."""
    try:
        return orjson.dumps(value).decode()
    except orjson.JSONEncodeError:
        raise too_deep() from None
