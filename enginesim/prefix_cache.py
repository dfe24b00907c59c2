"""KV block pool with a prefix cache, modelled on vLLM V1's block manager.

The pool holds ``num_blocks`` blocks of ``block_size`` tokens. A block is *used* while some
sequence references it. A full prompt block, once computed, is registered under its chained hash;
when its last reference goes it stays cached but *evictable*, and is reused by a later prompt with
the same prefix or evicted (least recently freed first) when a fresh block is needed.

No block contents exist: the pool only counts, which is all the scheduler and the metrics need.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence


class BlockPool:
    def __init__(self, num_blocks: int, enable_caching: bool = True) -> None:
        if num_blocks < 1:
            raise ValueError("num_blocks must be at least 1")
        self.num_blocks = num_blocks
        self.enable_caching = enable_caching
        self.used = 0  # blocks referenced by at least one sequence
        self._refs: dict[int, int] = {}  # block hash -> reference count, for cached blocks
        # Cached blocks with no reference, oldest first: the eviction order.
        self._evictable: OrderedDict[int, None] = OrderedDict()

    @property
    def usage(self) -> float:
        """Fraction of blocks in use (cached-but-free blocks count as free, as in vLLM)."""
        return self.used / self.num_blocks

    @property
    def num_cached(self) -> int:
        return len(self._refs)

    def match(self, hashes: Sequence[int], max_blocks: int) -> int:
        """How many leading blocks of a prompt are already cached (at most ``max_blocks``)."""
        if not self.enable_caching:
            return 0
        hits = 0
        for block_hash in hashes[:max_blocks]:
            if block_hash not in self._refs:
                break
            hits += 1
        return hits

    def can_allocate(self, hits: Sequence[int], num_new: int) -> bool:
        """Whether ``hits`` can be referenced and ``num_new`` fresh blocks allocated together."""
        revived = sum(1 for block_hash in hits if self._refs[block_hash] == 0)
        return self.num_blocks - self.used - revived >= num_new

    def acquire(self, hits: Sequence[int]) -> None:
        """Reference cached blocks (reviving evictable ones)."""
        for block_hash in hits:
            refs = self._refs[block_hash]
            if refs == 0:
                del self._evictable[block_hash]
                self.used += 1
            self._refs[block_hash] = refs + 1

    def allocate(self, num_new: int) -> bool:
        """Take ``num_new`` fresh blocks, evicting cached ones if needed; False if none fit."""
        if self.num_blocks - self.used < num_new:
            return False
        spare = self.num_blocks - self.used - len(self._evictable)
        while spare < num_new:
            block_hash, _ = self._evictable.popitem(last=False)
            del self._refs[block_hash]
            spare += 1
        self.used += num_new
        return True

    def register(self, block_hash: int) -> bool:
        """Turn a freshly computed, allocated block into a cached one under ``block_hash``.

        False when caching is off or that prefix is already cached by another block (which
        happens when two identical prompts are prefilled in the same step); the caller then keeps
        the block as a plain one.
        """
        if not self.enable_caching or block_hash in self._refs:
            return False
        self._refs[block_hash] = 1
        return True

    def release(self, hashed: Sequence[int], num_plain: int) -> None:
        """Drop a sequence's references: plain blocks are freed, cached ones become evictable."""
        # Tail blocks first, so they are evicted before the shared head of the prefix.
        for block_hash in reversed(hashed):
            refs = self._refs[block_hash] - 1
            self._refs[block_hash] = refs
            if refs == 0:
                self._evictable[block_hash] = None
                self.used -= 1
        self.used -= num_plain
