"""Is one line of a batch's input a request this batch may run? Checked when the batch starts, so
a bad line goes to the error file with its reason and the rest run.

A line is OpenAI's: {"custom_id": "...", "method": "POST", "url": "<the batch's endpoint>",
"body": {"model": "...", ...}}. Its custom_id must be unique in the file (outputs are keyed by
it), and its model one the key may use.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from fairness.batch import line_json
from fairness.batch.line_json import LineRefused

MAX_CUSTOM_ID = 512


@dataclass(frozen=True)
class GoodLine:
    custom_id: str
    body: str  # the request body as JSON text


@dataclass(frozen=True)
class BadLine:
    custom_id: str  # "" when the line has none
    code: str
    message: str


def check_line(
    raw: bytes | str, endpoint: str, seen: set[str], model_refusal: Callable[[str], tuple[str, str] | None],
    max_body_bytes: int,
) -> GoodLine | BadLine:
    """`model_refusal(model)`: the code and words of why the key may not use the model, or None.
    `seen` gathers the custom_ids of the good lines so far."""
    try:
        line = line_json.loads(raw)
    except LineRefused as refused:
        return BadLine("", refused.code, refused.message)
    if not isinstance(line, dict):
        return BadLine("", "invalid_request", "A line must be a JSON object with custom_id, method, url and body.")
    custom_id = line.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id or len(custom_id) > MAX_CUSTOM_ID or "\x00" in custom_id:
        return BadLine("", "missing_custom_id", f"Each line needs a custom_id: a string of 1 to {MAX_CUSTOM_ID} "
                       "characters, none of them NUL.")
    if custom_id in seen:
        return BadLine(custom_id, "duplicate_custom_id", f"The custom_id {custom_id[:80]!r} is used by an earlier "
                       "line; each line's custom_id must be unique in the file.")
    if line.get("method") != "POST":
        return BadLine(custom_id, "invalid_method", "The line's method must be POST.")
    if line.get("url") != endpoint:
        return BadLine(custom_id, "invalid_url", f"The line's url must be the batch's endpoint, {endpoint}.")
    body = line.get("body")
    if not isinstance(body, dict):
        return BadLine(custom_id, "invalid_body", "The line's body must be a JSON object: the request.")
    model = body.get("model")
    if not isinstance(model, str) or not model or "\x00" in model:  # a NUL: no database column holds it
        return BadLine(custom_id, "missing_model", "The request names no model.")
    if body.get("stream"):
        return BadLine(custom_id, "stream_not_supported", "A batch's requests cannot stream; leave out 'stream'.")
    refusal = model_refusal(model)
    if refusal is not None:
        return BadLine(custom_id, *refusal)  # the live call's code and words
    try:
        text = line_json.dumps(body)
    except LineRefused as refused:
        return BadLine(custom_id, refused.code, refused.message)
    if len(text.encode()) > max_body_bytes:
        return BadLine(custom_id, "request_too_large", "The request is larger than any the gateway takes.")
    seen.add(custom_id)
    return GoodLine(custom_id, text)
