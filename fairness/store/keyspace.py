"""Every Redis key gpuportal writes, with its type, owner and lifetime. Nothing else spells one.

The supported shape is one Redis server (with a replica for failover). The braces in some names
are Redis Cluster hash tags left from keeping related keys together; they do not make the
project Cluster-ready: a request's release sends admission's script and its accounting in one
pipeline, which spans two slots.

Two libraries keep keys of their own in the same database, under their own names: Django's cache
(`:1:` prefix) and Celery (its broker queues and `_kombu` bindings).
"""

from __future__ import annotations

PREFIX = "gp"

# -- admission (scheduling/admission.py) --------------------------------------------------------
# Its Lua scripts get this namespace as KEYS[1] and derive every key they touch from it; the
# layout of those keys is documented in scheduling/lua/lib/state.lua. Leases and tickets expire with
# the lease TTL unless renewed; the counters live as long as anything is in flight or queued.
ADMISSION_NAMESPACE = PREFIX + ":{adm}:"
# Suffixes inside the namespace that Python reads, each ADMISSION_<NAME> after its name in
# state.lua's KEY table (hash fields: ADMISSION_FIELD_<NAME>, after its FIELD table); a test holds
# the two together. Short on the wire, and never renamed: old and new gateways share one Redis
# through a rolling upgrade.
# hashes the pages read: key id -> leases in flight, tickets queued; replica -> leases running on it
ADMISSION_IN_FLIGHT_BY_KEY = "kin"
ADMISSION_QUEUED_BY_KEY = "kq"
ADMISSION_IN_FLIGHT_BY_REPLICA = "rin"
# hashes association -> "usage|valued_at" and -> normalised share S (field "*": everyone's usage;
# the half-life), read by Admission.fair_share_usage
ADMISSION_FAIR_SHARE_USAGE = "fu"
ADMISSION_FAIR_SHARES = "fs"
# + a budget window's field: the hash of its counters, read by the budget pages: reserved, and
# settled (a rolling window's per bucket: the field + the bucket's number)
ADMISSION_BUDGET_WINDOW = "bw:"
ADMISSION_FIELD_BUDGET_RESERVED = "r"
ADMISSION_FIELD_BUDGET_SETTLED = "u"
# string, set once the database's budget counts have been added back after Redis lost them
# (telemetry/budget_status.py); Python's own: no script reads it
ADMISSION_BUDGETS_RESTORED = "bok"
# the counters the benchmarks watch: in flight per group and pool, borrowed per pool, queued per
# group and pool; and the zset of leases by expiry
ADMISSION_IN_FLIGHT_BY_GROUP = "gin"
ADMISSION_IN_FLIGHT_BY_POOL = "pin"
ADMISSION_BORROWED_BY_POOL = "pbin"
ADMISSION_QUEUED_BY_GROUP = "gq"
ADMISSION_QUEUED_BY_POOL = "pq"
ADMISSION_LEASE_EXPIRY = "lx"
# the rest only tests read, to check the scripts' work (state.lua documents them)
ADMISSION_CHAT_ACTIVITY = "act"
ADMISSION_HEAD_INDEX = "idx"
ADMISSION_LEASE = "l:"
ADMISSION_TICKET = "t:"
ADMISSION_STREAM = "q:"
ADMISSION_STREAM_HEADS = "l2:"
ADMISSION_ELIGIBLE = "l3:"
ADMISSION_BORROWER_HEADS = "b:"
ADMISSION_POOL_TICKETS = "pe:"
ADMISSION_KEY_STREAMS = "ks:"
ADMISSION_POOL_GROUPS = "pg:"


def admission_namespace(prefix: str = PREFIX) -> str:
    """Admission's namespace under another prefix (tests keep their runs apart with one)."""
    return f"{prefix}:{{adm}}:"


def grant_channel(namespace: str, process_id: str) -> str:
    """Pub/sub channel on which one gateway process hears of grants to its waiting tickets."""
    return f"{namespace}grants:{process_id}"


# -- routing and health (scheduling/routing.py, scheduling/health.py) ---------------------------
ROUTING_NAMESPACE = PREFIX + ":{rt}:"
# string, SET NX with a TTL of one probe interval: whichever process holds it probes the replicas
HEALTH_PROBE_LOCK = ROUTING_NAMESPACE + "probe-lock"


def health_verdict(replica_name: str, base_url: str) -> str:
    """String "up" or "down" with a TTL of a few probe intervals (or one cooldown for a failure
    seen on the request path). The address is part of the key: a replica moved to a new address
    starts with no verdict rather than inheriting the old address's."""
    return f"{ROUTING_NAMESPACE}health:{replica_name}@{base_url}"


def health_failures(replica_name: str, base_url: str) -> str:
    """Sorted set caller -> Redis time (ms) of that caller's latest request that failed on the
    replica (5xx, timeout), written only when a request fails (scheduling/lua/health_failure.lua);
    entries older than the failure window are trimmed on each write, the key expires one window
    after the last failure and is deleted when the failures mark the replica down."""
    return f"{ROUTING_NAMESPACE}failures:{replica_name}@{base_url}"


# -- accounting (gateway/accounting.py writes, telemetry reads) ---------------------------------
# list of JSON usage events, RPUSHed in the round trip that gives a lease back, drained into the
# database by the flush task (accounting/usage.py); entries stay until their batch is committed,
# or until GP_USAGE_BACKLOG_MAX newer ones push them out (counted as dropped)
USAGE_EVENTS = PREFIX + ":usage"
# list of the raw usage events the flush set aside (not readable, or refused by the database for
# their data), so one cannot fail every batch it sits in; the newest 10,000 kept, never expires
USAGE_REJECTED = PREFIX + ":usage:rejected"
# lock (redis-py Lock), 60 s: one flusher at a time
USAGE_FLUSH_LOCK = PREFIX + ":usage:flush-lock"
# string, JSON: the dropped-events count the alert check last saw and when it last rose
# (telemetry/alerts.py); never expires, replaced by each check
USAGE_DROPS_SEEN = PREFIX + ":usage:drops-seen"
# hash of the gateway's own counters (requests, tokens, queue-wait buckets, rejections, the
# usage list's pushed/drained books and the outboxes' retried/dropped/repushed counts), bumped
# beside each usage event; never expires (a Redis restart resets it, as a counter reset)
GATEWAY_COUNTERS = PREFIX + ":metrics:{gp:usage}"
# hash gateway process id -> usage events its outbox still holds (gateway/usage_outbox.py),
# written when a retry reaches Redis with more left, the field deleted once it is empty; the key
# expires a minute after the last write, so a dead process's field does not linger
USAGE_OUTBOX_WAITING = PREFIX + ":usage:outbox-waiting"
# string: a random id, SET NX by the first gateway process that finds it missing
# (gateway/usage_outbox.py); never expires, so a different id means Redis lost its data
# (restarted empty) and usage events it held before the flush task drained them must be pushed again
STORE_BOOT = PREFIX + ":store-boot"

# -- stored responses (gateway/stored_responses.py) ----------------------------------------------
# string per Responses API response the engine stored: "replica|person id|model", expiring
# GP_STORED_RESPONSE_DAYS after its creation. The engine holds the response itself, in its memory.
STORED_RESPONSE = PREFIX + ":response:"

# -- configuration (store/config_epoch.py) ------------------------------------------------------
# string: a random value replaced after every committed change to keys, tiers, replicas or users
CONFIG_EPOCH = PREFIX + ":config-epoch"

# -- telemetry (telemetry/polling.py, capacity_store.py, alerts.py, tasks.py) --------------------
# hash replica name -> the latest reading the pages show, as JSON; entries of removed replicas
# are dropped by the next poll
TELEMETRY_LATEST = PREFIX + ":telemetry:latest"
# hash model -> CapacityEstimate as JSON ("" when there is none), replaced by each refit
CAPACITY_ESTIMATES = PREFIX + ":capacity:estimates"
# string: when capacity was last refitted (epoch seconds)
CAPACITY_REFITTED_AT = PREFIX + ":capacity:refitted-at"

# -- the workers' heartbeats (store/heartbeats.py writes, telemetry/worker_health.py reads) -------
# hash worker -> when it last started a task (epoch seconds): "periodic" by the poll task beat
# starts every GP_POLL_SECONDS, "batches" by the batch runner's task on the batches queue; each
# field replaced at every run, never expires: a stale value is what the staff home reports
WORKER_HEARTBEATS = PREFIX + ":workers:heartbeats"


def task_lock(task: str) -> str:
    """String: the random token of the periodic task's run that holds it (store/task_locks.py),
    SET NX PX by the run that starts; deleted by that run when it ends, or kept until its spacing
    after the start (the poll: most of GP_POLL_SECONDS); otherwise it expires after the task's
    longest run, so a worker that died holding it delays the task by that much at most."""
    return f"{PREFIX}:task-lock:{task}"


def telemetry_snapshot(replica_name: str) -> str:
    """String: a replica's last parsed scrape as JSON, the base of the next poll's rates."""
    return f"{PREFIX}:telemetry:snapshot:{replica_name}"


def saturation_state(model: str) -> str:
    """String: a model's saturation detector state between polls, as JSON."""
    return f"{PREFIX}:saturation:{model}"


# -- the pages (portal/submit_once.py) -----------------------------------------------------------


def submitted_form(token: str) -> str:
    """String, 24 h: what the first submission of a submit-once form made ("" while it runs)."""
    return f"{PREFIX}:once:{token}"


# -- sign-in (portal/signin/limits.py) ------------------------------------------------------------------


def signin_attempts_by_address(address: str) -> str:
    """Integer: sign-in attempts from one client address that did not succeed (or have not yet),
    expiring GP_SIGNIN_LOCKOUT_SECONDS after the first one counted."""
    return f"{PREFIX}:signin:addr:{address}"


def signin_attempts_by_username(normalised_username: str) -> str:
    """Integer: sign-in attempts at one username (NFKC + casefold) since its last success,
    expiring GP_SIGNIN_LOCKOUT_SECONDS after the first one counted."""
    return f"{PREFIX}:signin:user:{normalised_username}"
