"""Token approximation: deterministic, tokenizer-free, cheap.

Rules (also in enginesim/README.md):

* Text is encoded as UTF-8 and padded with NUL bytes to a multiple of 4; every 4 bytes are one
  token. So ``tokens = ceil(len(utf8) / 4)`` (at least 1): close to real BPE tokenizers on
  English text, and a pure function of the text, so a gateway can predict it.
* A completions ``prompt`` given as a list of integer token ids counts one token per id.
* Chat messages are rendered with a ChatML template before counting::

      <|im_start|>{role}\\n{content}<|im_end|>\\n   (for each message)
      <|im_start|>assistant\\n                     (generation prompt)

  The markers are counted like any other text. A conversation that grows turn by turn therefore
  renders to a string that starts with the previous turn's prompt, which is what lets the prefix
  cache hit on multi-turn chats.
* Prefix-cache blocks are ``block_size`` tokens (``4 * block_size`` bytes); each full block's hash
  chains its parent's hash, as in vLLM, so equal hashes mean equal prefixes.
* Output tokens are words from a fixed list, chosen from a seed derived from the prompt.
"""

from __future__ import annotations

import array
import zlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

BYTES_PER_TOKEN = 4

# Output vocabulary. Plain ASCII letters, so a token's text needs no JSON escaping.
WORDS: tuple[str, ...] = (
    "lorem", "ipsum", "dolor", "sit", "amet", "consectetur", "adipiscing", "elit", "sed", "do",
    "eiusmod", "tempor", "incididunt", "ut", "labore", "et", "dolore", "magna", "aliqua", "enim",
    "ad", "minim", "veniam", "quis", "nostrud", "exercitation", "ullamco", "laboris", "nisi",
    "aliquip", "ex", "ea", "commodo", "consequat", "duis", "aute", "irure", "in", "voluptate",
    "velit", "esse", "cillum", "fugiat", "nulla", "pariatur", "excepteur", "sint", "occaecat",
    "cupidatat", "non", "proident", "sunt", "culpa", "qui", "officia", "deserunt", "mollit",
    "anim", "id", "est", "laborum", "vitae", "porta", "nunc",
)
# Each token after the first carries its leading space, as BPE tokens do.
_SPACED: tuple[str, ...] = tuple(" " + word for word in WORDS)


def encode_text(text: str) -> bytes:
    """The prompt as token units: UTF-8 padded to whole tokens."""
    data = text.encode("utf-8")
    pad = -len(data) % BYTES_PER_TOKEN
    return data + b"\0" * pad if pad else data


def encode_ids(ids: Sequence[int]) -> bytes:
    """A prompt given as token ids: four bytes per id, so the count and hashing stay uniform."""
    return array.array("I", (i & 0xFFFFFFFF for i in ids)).tobytes()


def count_tokens(units: bytes) -> int:
    return max(1, len(units) // BYTES_PER_TOKEN)


def block_hashes(units: bytes, block_size: int, salt: str = "") -> list[int]:
    """Chained hashes of the full blocks of the prompt (a partial last block is not cached).
    A salt enters the first block's hash, as vLLM's `cache_salt` does, so prompts with
    different salts share no cached block."""
    step = block_size * BYTES_PER_TOKEN
    parent = hash(("cache_salt", salt)) if salt else 0
    hashes: list[int] = []
    for start in range(0, len(units) - step + 1, step):
        # Python's hash is salted per process; the cache lives in one process, so that is fine.
        parent = hash((parent, units[start : start + step]))
        hashes.append(parent)
    return hashes


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        # OpenAI content parts: only text parts contribute tokens here.
        return "".join(
            part.get("text", "") for part in content if isinstance(part, Mapping)
        )
    raise ValueError("message content must be a string, a list of parts or null")


def render_chat(messages: Iterable[Mapping[str, Any]]) -> str:
    parts: list[str] = []
    for message in messages:
        role = message.get("role")
        if not isinstance(role, str):
            raise ValueError("each message needs a string 'role'")
        parts.append(f"<|im_start|>{role}\n{_content_text(message.get('content'))}<|im_end|>\n")
    parts.append("<|im_start|>assistant\n")
    return "".join(parts)


def prompt_seed(units: bytes) -> int:
    """A stable seed (same across processes and runs) for output words and natural length."""
    return zlib.crc32(units)


def output_pieces(seed: int, start: int, stop: int) -> list[str]:
    """The text of output tokens ``start`` .. ``stop - 1`` of the reply seeded by ``seed``."""
    n = len(WORDS)
    pieces = [_SPACED[(seed + 7 * i) % n] for i in range(start, stop)]
    if start == 0 and pieces:
        pieces[0] = pieces[0][1:]
    return pieces


def natural_length(seed: int, max_tokens: int, min_tokens: int = 0) -> int:
    """How many tokens the reply has before its end-of-sequence, when EOS is not ignored.

    Uniform-ish over 1..max_tokens, deterministic in the prompt; a reply of exactly max_tokens
    reports finish_reason "length".
    """
    natural = 1 + (seed >> 3) % max_tokens
    return min(max_tokens, max(natural, min_tokens, 1))
