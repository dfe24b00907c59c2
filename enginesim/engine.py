"""The continuous-batching engine loop and its timing model.

Every decode step produces one token for each running sequence and lasts

    (a + c * batch + uncached_prompt_tokens_joining / prefill_rate) / speed

so one stream gets about 1 / a tokens/s and the aggregate grows with the batch until c dominates.
Waiting sequences join at the next step while a slot (``max_num_seqs``) and KV blocks are free; a
finished or aborted sequence leaves at once. KV blocks grow one block at a time as tokens are
produced; when none is free, the most recently admitted running sequence (or, under the priority
policy, the least urgent one) is preempted back to the waiting queue and later recomputed,
as vLLM V1 does.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import time
from dataclasses import dataclass, field

from .config import SimConfig
from .metrics import EngineStats
from .prefix_cache import BlockPool
from .queues import FcfsQueue, PriorityQueue, make_queue

log = logging.getLogger("enginesim")

# How far behind its schedule the loop may fall (a busy host) before it gives up catching up.
MAX_LAG_S = 0.25


@dataclass(frozen=True)
class TimingModel:
    step_base_s: float = 0.0098
    step_per_seq_s: float = 0.00019
    prefill_tokens_per_s: float = 8000.0
    speed: float = 1.0

    @classmethod
    def from_config(cls, config: SimConfig) -> TimingModel:
        return cls(config.step_base_ms / 1000, config.step_per_seq_ms / 1000,
                   config.prefill_tokens_per_second, config.speed)

    def step_seconds(self, batch: int, prefill_tokens: int = 0) -> float:
        base = self.step_base_s + self.step_per_seq_s * batch
        return (base + prefill_tokens / self.prefill_tokens_per_s) / self.speed

    def tokens_per_second(self, batch: int) -> float:
        """Aggregate decode throughput at a steady batch size (what the capacity model fits)."""
        return batch / self.step_seconds(batch)


class State(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"
    ABORTED = "aborted"


@dataclass(eq=False)
class Sequence:
    prompt_len: int
    block_hashes: list[int]
    max_tokens: int
    target_tokens: int  # where it stops: max_tokens, or earlier at its "EOS"
    priority: int = 0
    stream: bool = False  # wake the handler for every token, not only at the end
    arrival_no: int = 0
    state: State = State.WAITING
    generated: int = 0
    finish_reason: str | None = None
    arrival: float = 0.0
    scheduled_at: float | None = None
    first_token_at: float | None = None
    hashed: list[int] = field(default_factory=list)  # cached blocks referenced
    # Prompt tokens found in the prefix cache when first scheduled (vLLM's num_cached_tokens:
    # a preempted sequence's later re-admission does not change it).
    num_cached_tokens: int = 0
    _admitted: bool = False
    plain: int = 0  # uncached blocks held
    _waiter: asyncio.Future[None] | None = None

    @property
    def done(self) -> bool:
        return self.state is State.FINISHED or self.state is State.ABORTED

    @property
    def num_blocks(self) -> int:
        return len(self.hashed) + self.plain

    def wake(self) -> None:
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    async def wait(self, seen: int = -1) -> None:
        """Until more than ``seen`` tokens exist (streaming) or the sequence is done."""
        while not self.done and (not self.stream or self.generated <= seen):
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter


class Engine:
    def __init__(self, config: SimConfig, timing: TimingModel | None = None) -> None:
        self.config = config
        self.timing = timing or TimingModel.from_config(config)
        self.block_size = config.block_size
        self.num_gpu_blocks = config.gpu_blocks
        self.enable_prefix_caching = config.enable_prefix_caching
        self.max_num_seqs = config.max_num_seqs
        self.pool = BlockPool(self.num_gpu_blocks, config.enable_prefix_caching)
        self.waiting: FcfsQueue[Sequence] | PriorityQueue[Sequence] = make_queue(
            config.scheduling_policy
        )
        self.running: list[Sequence] = []
        self.stats = EngineStats()
        self._priority_policy = config.scheduling_policy == "priority"
        self._arrivals = 0
        self.slipped_s = 0.0  # schedule time given up after host stalls (see MAX_LAG_S)
        self._work = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    # -- the view read by /metrics and /sim/stats

    @property
    def num_running(self) -> int:
        return len(self.running)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    @property
    def kv_usage(self) -> float:
        return self.pool.usage

    def reset_peak(self) -> None:
        self.stats.peak_running = len(self.running)

    # -- lifecycle

    @property
    def alive(self) -> bool:
        """False once the loop has died; /health then answers 503, as vLLM's does."""
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="enginesim-loop")
        self._task.add_done_callback(self._loop_ended)

    def _loop_ended(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("engine loop died", exc_info=task.exception())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    # -- requests

    def submit(self, seq: Sequence) -> None:
        self._arrivals += 1
        seq.arrival_no = self._arrivals
        seq.arrival = time.monotonic()
        seq.state = State.WAITING
        self.stats.requests_total += 1
        self.waiting.push(seq)
        self._work.set()

    def abort(self, seq: Sequence) -> None:
        """Drop a sequence wherever it is (client gone) and free its blocks at once."""
        if seq.done:
            return
        if seq.state is State.WAITING:
            self.waiting.remove(seq)
        else:
            self.running.remove(seq)
            self._release(seq)
        seq.state = State.ABORTED
        seq.finish_reason = "abort"
        self.stats.finished["abort"] += 1
        seq.wake()

    # -- scheduling

    def _release(self, seq: Sequence) -> None:
        self.pool.release(seq.hashed, seq.plain)
        seq.hashed = []
        seq.plain = 0

    def _blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.block_size)

    def _pick_victim(self) -> Sequence:
        if self._priority_policy:
            return max(self.running, key=lambda s: (s.priority, s.arrival_no))
        return self.running[-1]

    def _preempt(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self._release(seq)
        seq.state = State.WAITING
        self.stats.preemptions += 1
        self.waiting.push_preempted(seq)

    def _grow_running(self) -> bool:
        """Give each running sequence room for this step's token; True if anyone was preempted."""
        preempted = False
        for seq in list(self.running):
            if seq.state is not State.RUNNING:
                continue  # preempted earlier in this loop
            need = self._blocks_for(seq.prompt_len + seq.generated) - seq.num_blocks
            if need <= 0:
                continue
            while not self.pool.allocate(need):
                victim = self._pick_victim()
                self._preempt(victim)
                preempted = True
                if victim is seq:
                    break
            else:
                seq.plain += need
        return preempted

    def _try_admit(self, seq: Sequence) -> int | None:
        """Reserve blocks for a waiting sequence; the uncached tokens to prefill, or None."""
        total = seq.prompt_len + seq.generated  # a preempted sequence recomputes its output too
        # At least one token is always computed, as in vLLM, hence total - 1.
        hit_blocks = self.pool.match(seq.block_hashes, (total - 1) // self.block_size)
        hits = seq.block_hashes[:hit_blocks]
        need = self._blocks_for(total) - hit_blocks
        if not self.pool.can_allocate(hits, need):
            return None
        self.pool.acquire(hits)
        self.pool.allocate(need)
        seq.hashed = list(hits)
        seq.plain = need
        for block_hash in seq.block_hashes[hit_blocks:]:
            if self.pool.register(block_hash):
                seq.hashed.append(block_hash)
                seq.plain -= 1
        cached = hit_blocks * self.block_size
        if not seq._admitted:
            seq._admitted = True
            seq.num_cached_tokens = min(cached, seq.prompt_len)
        self.stats.prefix_queries += total
        self.stats.prefix_hits += cached
        return total - cached

    def schedule(self, now: float) -> int:
        """Form this step's batch; returns the prompt tokens it must prefill."""
        prefill = 0
        if self._grow_running():
            return prefill  # as in vLLM: no admissions in a step that had to preempt
        waiting = self.waiting
        while len(waiting) and len(self.running) < self.max_num_seqs:
            seq = waiting.peek()
            uncached = self._try_admit(seq)
            if uncached is None:
                break  # the head does not fit in KV; it waits (no skipping ahead)
            waiting.pop()
            seq.state = State.RUNNING
            if seq.scheduled_at is None:
                seq.scheduled_at = now
            self.running.append(seq)
            prefill += uncached
        if len(self.running) > self.stats.peak_running:
            self.stats.peak_running = len(self.running)
        return prefill

    def emit(self, batch: list[Sequence], now: float, step_s: float) -> None:
        """One token for every sequence that ran this step (and was not aborted meanwhile)."""
        stats = self.stats
        produced = 0
        later_tokens = 0
        finished = False
        for seq in batch:
            if seq.state is not State.RUNNING:
                continue
            produced += 1
            seq.generated += 1
            if seq.first_token_at is None:
                seq.first_token_at = now
                stats.ttft.observe(now - seq.arrival)
                stats.prompt_tokens += seq.prompt_len
            else:
                later_tokens += 1
            if seq.generated >= seq.target_tokens:
                self._finish(seq, now)
                finished = True
            elif seq.stream:
                seq.wake()
        stats.generation_tokens += produced
        if later_tokens:
            stats.inter_token.observe(step_s, later_tokens)
        if finished:
            self.running = [s for s in self.running if s.state is State.RUNNING]

    def _finish(self, seq: Sequence, now: float) -> None:
        self._release(seq)
        seq.state = State.FINISHED
        seq.finish_reason = "length" if seq.generated >= seq.max_tokens else "stop"
        stats = self.stats
        stats.finished[seq.finish_reason] += 1
        stats.e2e.observe(now - seq.arrival)
        stats.queue_time.observe((seq.scheduled_at or now) - seq.arrival)
        seq.wake()

    async def _run(self) -> None:
        deadline = time.monotonic()
        while True:
            if not self.running and not len(self.waiting):
                self._work.clear()
                await self._work.wait()
                deadline = time.monotonic()
            now = time.monotonic()
            # Keep an absolute schedule so timer jitter averages out, but do not burst to catch
            # up after a long stall of the host.
            if now - deadline > MAX_LAG_S:
                self.slipped_s += now - deadline
                deadline = now
            prefill = self.schedule(now)
            batch = list(self.running)
            step_s = self.timing.step_seconds(len(batch), prefill)
            deadline += step_s
            delay = deadline - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            else:
                await asyncio.sleep(0)  # let handlers run even when behind schedule
            self.emit(batch, time.monotonic(), step_s)
