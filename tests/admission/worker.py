"""A stand-in gateway process for test_processes.py (run as a script; pytest does not collect it).

    python worker.py '{"mode": "churn" | "hold", ...}'

churn: many concurrent acquire/hold/release loops against shared Redis, each grant checked by
       atomic counters (incremented after the grant, decremented before the release, so they
       never overstate what is held); broken invariants go to the list <check>violations.
hold:  take one lease, print "held", optionally queue another request, then wait to be killed.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import redis.asyncio as aredis  # noqa: E402

from fairness.scheduling.admission import Admission, Demand, Grant, QueueFull, QueueTimeout  # noqa: E402

# KEYS[1] checker prefix. ARGV: +1/-1, key, pool, group, borrowed 0/1, key cap, pool cap (-1 =
# none), capacity, reserve. Returns the number of invariants found broken by this step.
CHECK = """
local p, step = KEYS[1], tonumber(ARGV[1])
local key, pool, group, borrowed = ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local kcap, pcap = tonumber(ARGV[6]), tonumber(ARGV[7])
local cap, reserve = tonumber(ARGV[8]), tonumber(ARGV[9])
local bad = {}
local function count(hash, field, limit, what)
  local v = redis.call('HINCRBY', p .. hash, field, step)
  if step > 0 then
    if v > tonumber(redis.call('HGET', p .. 'peak', hash .. ':' .. field) or '0') then
      redis.call('HSET', p .. 'peak', hash .. ':' .. field, v)
    end
    if v > limit then bad[#bad + 1] = what .. ' ' .. field .. ' has ' .. v .. ' > ' .. limit end
  end
end
count('group', group, cap, 'engine group')
if borrowed == '1' then
  count('borrowed', group, cap - reserve, 'borrowed leases of group')
else
  count('key', key, kcap, 'key (unborrowed)')
  if pcap >= 0 then count('pool', pool, pcap, 'pool (unborrowed)') end
end
for _, b in ipairs(bad) do redis.call('RPUSH', p .. 'violations', b) end
return #bad
"""


async def churn(cfg: dict[str, Any]) -> None:
    client = aredis.Redis.from_url(cfg["url"])
    admission = Admission(
        client, prefix=cfg["prefix"], reserve_slots=cfg["reserve"], recheck_seconds=cfg["recheck"]
    )
    check = client.register_script(CHECK)
    demands = [Demand(**d) for d in cfg["demands"]]
    rng = random.Random(cfg["seed"])
    counts: Counter[str] = Counter()

    async def step(grant: Grant, sign: int) -> None:
        d = grant.demand
        pool_cap = -1 if d.pool_cap is None else d.pool_cap
        args: list[str | int] = [sign, d.key_id, d.tier, d.group, int(grant.borrowed)]
        args += [d.per_key_cap, pool_cap, cfg["capacity"], cfg["reserve"]]
        await check(keys=[cfg["check"]], args=args)

    async def one(demand: Demand) -> None:
        async with admission.held(demand) as grant:
            counts["borrowed" if grant.borrowed else "granted"] += 1
            if grant.borrowed and not demand.borrow:
                await client.rpush(cfg["check"] + "violations", f"{demand.key_id} borrowed")
            checked_in = asyncio.ensure_future(step(grant, 1))
            try:
                await asyncio.shield(checked_in)
                await asyncio.sleep(rng.uniform(0, cfg["max_hold"]))  # the "stream"
            finally:
                await asyncio.shield(checked_in)
                await asyncio.shield(step(grant, -1))

    async def loop() -> None:
        for _ in range(cfg["iterations"]):
            demand = rng.choice(demands)
            try:
                if rng.random() < cfg["cancel_ratio"]:  # a client that hangs up, queued or not
                    await asyncio.wait_for(one(demand), rng.uniform(0, 0.02))
                else:
                    await one(demand)
            except TimeoutError:
                counts["cancelled"] += 1
            except (QueueFull, QueueTimeout) as refused:
                counts[type(refused).__name__] += 1

    await asyncio.gather(*(loop() for _ in range(cfg["loops"])))
    await admission.close()
    await client.aclose()
    print(json.dumps(counts), flush=True)


async def hold(cfg: dict[str, Any]) -> None:
    client = aredis.Redis.from_url(cfg["url"])
    admission = Admission(
        client, prefix=cfg["prefix"], lease_ttl=cfg["ttl"], recheck_seconds=cfg["recheck"]
    )
    grant = await admission.acquire(Demand(**cfg["demand"]))
    print("held", grant.lease_id, flush=True)
    if cfg.get("queue"):
        asyncio.get_running_loop().create_task(admission.acquire(Demand(**cfg["queue"])))
    await asyncio.Event().wait()


if __name__ == "__main__":
    config = json.loads(sys.argv[1])
    asyncio.run({"churn": churn, "hold": hold}[config["mode"]](config))
