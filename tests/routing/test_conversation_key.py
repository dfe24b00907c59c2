"""The conversation key: every turn of a chat keeps its key; the session header wins."""

from __future__ import annotations

from collections import Counter

from fairness.scheduling.routing import choose, conversation_key

IDLE: dict[str, int] = {}


def chat_turns(first_question: str, turns: int = 8, system: str = "You are terse.") -> list[dict]:
    """The request bodies of one chat: each turn resends the history plus a new question."""
    messages = [{"role": "system", "content": system}, {"role": "user", "content": first_question}]
    bodies = []
    for turn in range(turns):
        bodies.append({"model": "m", "messages": list(messages)})
        messages += [
            {"role": "assistant", "content": f"answer {turn}"},
            {"role": "user", "content": f"follow-up question {turn}"},
        ]
    return bodies


def test_every_turn_of_a_chat_maps_to_one_key_and_one_replica(make_replicas):
    replicas = make_replicas(4)
    bodies = chat_turns("How do I tune max_num_seqs?")
    keys = {conversation_key(body) for body in bodies}
    assert len(keys) == 1 and None not in keys
    chosen = {choose(replicas, conversation_key(body), IDLE)[0].name for body in bodies}
    assert len(chosen) == 1


def test_different_first_questions_get_different_keys_spread_over_replicas(make_replicas):
    replicas = make_replicas(4)
    keys = [conversation_key(chat_turns(f"question number {i}")[0]) for i in range(400)]
    assert len(set(keys)) == 400
    spread = Counter(choose(replicas, key, IDLE)[0].name for key in keys)
    assert set(spread) == {"r0", "r1", "r2", "r3"}
    assert min(spread.values()) >= 60  # 100 each expected


def test_a_string_and_text_content_parts_give_the_same_key():
    as_string = {"model": "m", "messages": [{"role": "user", "content": "Hello there"}]}
    parts = [{"type": "text", "text": "Hello there"}]
    as_parts = {"model": "m", "messages": [{"role": "user", "content": parts}]}
    assert conversation_key(as_string) == conversation_key(as_parts)


def test_an_image_part_distinguishes_conversations():
    def with_image(url: str) -> dict:
        parts = [
            {"type": "text", "text": "What is this?"},
            {"type": "image_url", "image_url": {"url": url}},
        ]
        return {"model": "m", "messages": [{"role": "user", "content": parts}]}

    assert conversation_key(with_image("http://x.invalid/a.png")) != conversation_key(
        with_image("http://x.invalid/b.png")
    )


def test_the_system_prompt_and_the_model_are_part_of_the_key():
    base = chat_turns("Same question")[0]
    other_system = chat_turns("Same question", system="You are verbose.")[0]
    other_model = {**base, "model": "another-model"}
    keys = {conversation_key(body) for body in (base, other_system, other_model)}
    assert len(keys) == 3


def test_the_session_header_overrides_the_derived_key():
    first, second = chat_turns("one")[0], chat_turns("two")[0]
    assert conversation_key(first, "session-7") == conversation_key(second, "session-7")
    assert conversation_key(first, "session-7") != conversation_key(first, "session-8")
    assert conversation_key(first, "  ") == conversation_key(first)  # blank: no header


def test_completions_are_keyed_by_the_head_of_the_prompt():
    head = "x" * 256
    same_head = [{"model": "m", "prompt": head + tail} for tail in ("one ending", "another ending")]
    assert conversation_key(same_head[0]) == conversation_key(same_head[1])
    assert conversation_key({"model": "m", "prompt": "y" + head}) != conversation_key(same_head[0])
    batch = {"model": "m", "prompt": [head + "a", "b"]}
    assert conversation_key(batch) == conversation_key(same_head[0])


def test_token_id_prompts_are_keyed_by_their_first_ids():
    def key(prompt: object) -> str | None:
        return conversation_key({"model": "m", "prompt": prompt})

    ids = list(range(300))
    assert key(ids) == key(ids[:256] + [7])
    assert key([ids]) == key(ids)  # a batch of one token list
    assert key(ids) != key(ids[1:])
    assert key(ids) != key("0,1,2")


def test_an_empty_prompt_has_no_key():
    assert conversation_key({"model": "m", "prompt": ""}) is None
    assert conversation_key({"model": "m", "prompt": []}) is None
