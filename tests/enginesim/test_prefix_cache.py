"""The KV block pool and token approximation, tested directly (no server)."""

from __future__ import annotations

from enginesim.prefix_cache import BlockPool
from enginesim.tokens import (
    block_hashes,
    count_tokens,
    encode_ids,
    encode_text,
    natural_length,
    output_pieces,
    prompt_seed,
    render_chat,
)


def test_it_counts_four_bytes_of_utf8_per_token() -> None:
    assert count_tokens(encode_text("abcd")) == 1
    assert count_tokens(encode_text("abcde")) == 2
    assert count_tokens(encode_text("é" * 4)) == 2  # 8 bytes
    assert count_tokens(encode_text("")) == 1
    assert count_tokens(encode_ids([1, 2, 3])) == 3


def test_it_hashes_only_full_blocks_and_chains_them() -> None:
    text = "x" * (4 * 16 * 3 + 10)  # three full blocks and a partial one
    hashes = block_hashes(encode_text(text), 16)
    assert len(hashes) == 3
    other = block_hashes(encode_text("y" * 64 + "x" * 128), 16)
    # Same second-block content, different parent: different hash.
    assert other[1] != hashes[1]


def test_a_growing_chat_shares_the_previous_turns_prefix() -> None:
    turn1 = [{"role": "system", "content": "Be brief." * 20},
             {"role": "user", "content": "What is KV cache?" * 10}]
    turn2 = [*turn1, {"role": "assistant", "content": "A cache."},
             {"role": "user", "content": "And prefix caching?"}]
    first, second = encode_text(render_chat(turn1)), encode_text(render_chat(turn2))
    h1, h2 = block_hashes(first, 16), block_hashes(second, 16)
    assert h1 and h2[: len(h1)] == h1
    assert render_chat(turn1).endswith("<|im_start|>assistant\n")


def test_a_cache_salt_keeps_equal_prompts_from_sharing_blocks() -> None:
    units = encode_text("a shared system prompt " * 20)
    alice, again, bob = (block_hashes(units, 16, salt) for salt in ("alice", "alice", "bob"))
    assert alice == again  # one salt: the same blocks, so a hit
    assert not set(alice) & set(bob) and not set(alice) & set(block_hashes(units, 16))


def test_output_is_deterministic_and_length_bounded() -> None:
    seed = prompt_seed(encode_text("a prompt"))
    assert output_pieces(seed, 0, 5) == output_pieces(seed, 0, 5)
    assert "".join(output_pieces(seed, 0, 5)) == "".join(
        output_pieces(seed, 0, 2) + output_pieces(seed, 2, 5)
    )
    assert not output_pieces(seed, 0, 1)[0].startswith(" ")
    for max_tokens in (1, 2, 7, 100):
        assert 1 <= natural_length(seed, max_tokens) <= max_tokens
    assert natural_length(seed, 100, min_tokens=100) == 100


def test_it_reuses_cached_blocks_after_release() -> None:
    pool = BlockPool(num_blocks=10)
    hashes = [11, 22, 33]
    assert pool.match(hashes, 3) == 0
    assert pool.allocate(4)  # three prompt blocks plus one for the tail
    for h in hashes:
        assert pool.register(h)
    assert pool.used == 4
    pool.release(hashes, 1)
    assert pool.used == 0 and pool.num_cached == 3  # freed, but still cached
    assert pool.match(hashes, 3) == 3
    assert pool.match(hashes, 2) == 2  # capped, as vLLM recomputes the last token
    pool.acquire(hashes[:2])
    assert pool.used == 2


def test_it_evicts_least_recently_freed_blocks_first_and_tails_before_heads() -> None:
    pool = BlockPool(num_blocks=4)
    pool.allocate(2)
    pool.register(1)
    pool.register(2)
    pool.release([1, 2], 0)  # tail (2) is freed first, so it is evicted first
    pool.allocate(3)  # two spare blocks, then one eviction
    assert pool.match([1, 2], 2) == 1
    assert pool.used == 3


def test_it_refuses_allocations_beyond_the_budget() -> None:
    pool = BlockPool(num_blocks=3)
    assert pool.allocate(3)
    assert not pool.allocate(1)
    assert pool.usage == 1.0
    pool.release([], 3)
    assert pool.usage == 0.0


def test_reviving_a_cached_block_counts_against_capacity() -> None:
    pool = BlockPool(num_blocks=2)
    pool.allocate(1)
    pool.register(7)
    pool.release([7], 0)
    assert pool.can_allocate([7], 1)
    assert not pool.can_allocate([7], 2)
    assert pool.can_allocate([], 2)  # the cached block can be evicted instead


def test_with_caching_disabled_nothing_is_matched() -> None:
    pool = BlockPool(num_blocks=4, enable_caching=False)
    pool.allocate(1)
    assert not pool.register(5)
    pool.release([], 1)
    assert pool.match([5], 1) == 0
