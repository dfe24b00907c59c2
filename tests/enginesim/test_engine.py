"""The batching scheduler, driven step by step without a clock or a server."""

from __future__ import annotations

from enginesim.config import SimConfig
from enginesim.engine import Engine, Sequence, State, TimingModel


def make_engine(**overrides: object) -> Engine:
    config = SimConfig(**{"max_num_seqs": 2, "max_model_len": 256, **overrides})  # type: ignore[arg-type]
    config.validate()
    return Engine(config)


def seq(prompt_len: int = 20, tokens: int = 3, priority: int = 0,
        hashes: list[int] | None = None) -> Sequence:
    return Sequence(prompt_len=prompt_len, block_hashes=hashes or [], max_tokens=tokens,
                    target_tokens=tokens, priority=priority)


def step(engine: Engine) -> tuple[list[Sequence], int]:
    prefill = engine.schedule(0.0)
    batch = list(engine.running)
    engine.emit(batch, 0.0, 0.01)
    return batch, prefill


def test_step_time_follows_a_plus_c_times_batch() -> None:
    timing = TimingModel()
    assert abs(timing.tokens_per_second(1) - 100.1) < 0.1
    assert abs(timing.tokens_per_second(32) - 2015) < 1
    assert timing.step_seconds(1, prefill_tokens=8000) == timing.step_seconds(1) + 1.0
    assert TimingModel(speed=10).step_seconds(4) == timing.step_seconds(4) / 10


def test_a_waiting_request_joins_at_the_next_step_and_a_finished_one_leaves_at_once() -> None:
    engine = make_engine()
    a, b, c = seq(tokens=1), seq(tokens=3), seq(tokens=3)
    for s in (a, b, c):
        engine.submit(s)
    batch, _ = step(engine)
    assert batch == [a, b] and engine.num_waiting == 1
    assert a.state is State.FINISHED and a.finish_reason == "length"
    assert engine.running == [b]
    batch, _ = step(engine)
    assert batch == [b, c]  # c took a's slot at the very next step
    assert engine.stats.peak_running == 2


def test_each_step_produces_one_token_per_running_sequence() -> None:
    engine = make_engine(max_num_seqs=4)
    seqs = [seq(tokens=5) for _ in range(3)]
    for s in seqs:
        engine.submit(s)
    for _ in range(5):
        step(engine)
    assert [s.generated for s in seqs] == [5, 5, 5]
    assert engine.stats.generation_tokens == 15
    assert engine.num_running == 0 and engine.pool.used == 0


def test_priority_policy_admits_the_lowest_priority_value_first_then_by_arrival() -> None:
    engine = make_engine(max_num_seqs=1, scheduling_policy="priority")
    order = [seq(tokens=1, priority=p) for p in (5, 1, 3, 1)]
    for s in order:
        engine.submit(s)
    admitted = [step(engine)[0][0] for _ in range(4)]
    assert admitted == [order[1], order[3], order[2], order[0]]


def test_fcfs_ignores_priority() -> None:
    engine = make_engine(max_num_seqs=1)
    order = [seq(tokens=1, priority=p) for p in (5, 1, 3)]
    for s in order:
        engine.submit(s)
    assert [step(engine)[0][0] for _ in range(3)] == order


def test_cached_prefix_blocks_skip_prefill() -> None:
    engine = make_engine()
    hashes = [101, 102, 103]  # a 50-token prompt: three full blocks
    first = seq(prompt_len=50, tokens=1, hashes=hashes)
    engine.submit(first)
    assert step(engine)[1] == 50
    again = seq(prompt_len=50, tokens=1, hashes=hashes)
    engine.submit(again)
    assert step(engine)[1] == 50 - 48
    assert engine.stats.prefix_hits == 48 and engine.stats.prefix_queries == 100


def test_a_request_that_does_not_fit_in_kv_waits_for_blocks() -> None:
    engine = make_engine(num_gpu_blocks=16, max_num_seqs=4)
    big = seq(prompt_len=200, tokens=40)  # 13 blocks now, 15 at the end
    small = seq(prompt_len=100, tokens=2)  # 7 blocks
    engine.submit(big)
    engine.submit(small)
    step(engine)
    assert engine.running == [big] and engine.num_waiting == 1
    assert 0 < engine.kv_usage <= 1
    while big.state is not State.FINISHED:
        step(engine)
    step(engine)
    assert small.state is State.RUNNING


def test_kv_pressure_preempts_the_newest_and_everyone_still_finishes_exactly() -> None:
    engine = make_engine(num_gpu_blocks=16, max_num_seqs=4)
    seqs = [seq(prompt_len=64, tokens=150) for _ in range(4)]  # 4 blocks each at admission
    for s in seqs:
        engine.submit(s)
    for _ in range(2000):
        step(engine)
        assert engine.pool.used <= 16
        if all(s.done for s in seqs):
            break
    assert [s.generated for s in seqs] == [150] * 4
    assert all(s.finish_reason == "length" for s in seqs)
    assert engine.stats.preemptions > 0
    assert engine.pool.used == 0


def test_under_the_priority_policy_an_urgent_request_waits_for_a_slot_it_does_not_preempt_for_one() -> None:
    # As vLLM 0.32's scheduler: waiting requests are admitted only while running < max_num_seqs;
    # priority picks who goes next and who is preempted when KV runs short, never makes a slot.
    engine = make_engine(max_num_seqs=2, scheduling_policy="priority")
    low = [seq(tokens=3, priority=10) for _ in range(2)]
    urgent = seq(tokens=1, priority=0)
    for s in low:
        engine.submit(s)
    step(engine)
    engine.submit(urgent)
    batch, _ = step(engine)
    assert batch == low and urgent.state is State.WAITING and engine.stats.preemptions == 0
    step(engine)  # both finish
    assert step(engine)[0] == [urgent]


def test_under_the_priority_policy_kv_pressure_preempts_the_least_urgent_not_the_newest() -> None:
    engine = make_engine(num_gpu_blocks=16, max_num_seqs=2, scheduling_policy="priority")
    batch_work, chat = seq(prompt_len=64, tokens=150, priority=10), seq(prompt_len=64, tokens=150, priority=0)
    engine.submit(batch_work)
    step(engine)
    engine.submit(chat)  # the newest: FCFS would preempt it
    while engine.stats.preemptions == 0 and not chat.done:
        step(engine)
    assert batch_work.state is State.WAITING and chat.state is State.RUNNING
    while not (chat.done and batch_work.done):
        step(engine)
    assert (chat.generated, batch_work.generated) == (150, 150)


def test_abort_frees_the_slot_and_blocks_at_once() -> None:
    engine = make_engine(max_num_seqs=1)
    running, waiting = seq(tokens=100), seq(tokens=100)
    engine.submit(running)
    engine.submit(waiting)
    step(engine)
    engine.abort(waiting)
    assert engine.num_waiting == 0
    engine.abort(running)
    assert engine.num_running == 0 and engine.pool.used == 0
    assert engine.stats.finished["abort"] == 2
    engine.abort(running)  # idempotent
    assert engine.stats.finished["abort"] == 2


def test_abort_in_the_priority_queue_removes_only_that_request() -> None:
    engine = make_engine(max_num_seqs=1, scheduling_policy="priority")
    blocker, low, high = seq(tokens=10), seq(tokens=1, priority=9), seq(tokens=1, priority=0)
    for s in (blocker, low, high):
        engine.submit(s)
    step(engine)
    engine.abort(high)
    assert engine.num_waiting == 1
    engine.abort(blocker)
    assert step(engine)[0] == [low]
