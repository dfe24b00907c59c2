"""A lean HTTP/1.1 load generator for the overhead benchmark, in processes of its own.

httpx spends a few hundred microseconds of CPU per request; on a two-core box that time is
taken from the server under test, and one httpx process saturates before a fast server does.
This client writes prebuilt request bytes on keep-alive connections and parses only what it
needs (status, Content-Length or chunked framing, SSE event boundaries), on uvloop. It
speaks to our gateway, LiteLLM's proxy and enginesim alike, so its own cost is the same in
every column and cancels out of "added" figures.

A phase is a closed loop of ``concurrency`` workers; each sends, reads the whole answer and
sends again. Workers are split across the child processes. The parent fixes the measurement
window as absolute ``time.perf_counter()`` instants (the system-wide monotonic clock on
Linux, so child and parent agree): a request counts when it ends inside the window; workers
stop sending at the window's end.

    with LoadGenerators(1) as gens:
        gens.start(PhaseSpec(...), PhaseSpec(...))   # side by side
        first, second = gens.collect(timeout=60)
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import math
import multiprocessing
import time
from array import array
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any, Self
from urllib.parse import urlsplit

HEAD_END = b"\r\n\r\n"
EVENT_END = b"\n\n"
# Gaps between SSE events go into a histogram (millions of them per phase): log bins 2 % wide
# from 0.1 us up; bin -1 holds gaps under 0.1 us (events that arrived in the same read).
GAP_FLOOR = 1e-7
GAP_STEP = 1.02
_LOG_STEP = math.log(GAP_STEP)


def gap_bin(gap: float) -> int:
    return -1 if gap < GAP_FLOOR else int(math.log(gap / GAP_FLOOR) / _LOG_STEP)


def bin_value(b: int) -> float:
    return 0.0 if b < 0 else GAP_FLOOR * GAP_STEP ** (b + 0.5)


def hist_percentile(hist: dict[int, int], q: float) -> float | None:
    """The ``q``-th percentile (0-100) of the values binned in ``hist``."""
    total = sum(hist.values())
    if not total:
        return None
    rank = q / 100.0 * (total - 1)
    seen = 0
    for b in sorted(hist):
        seen += hist[b]
        if seen > rank:
            return bin_value(b)
    return bin_value(max(hist))


@dataclass(frozen=True)
class PhaseSpec:
    """One closed-loop phase. ``bodies`` are JSON bodies sent in turn; ``secrets`` are
    spread over workers (worker i uses secret i mod n); each worker spreads its requests
    over ``urls`` in turn. A paired comparison may give each url its own secret
    (``url_secrets``, "" for none) and a front end's user (``url_users``, None for none), whose
    token is minted afresh for every request (before the request's clock starts)."""

    urls: tuple[str, ...]
    path: str
    bodies: tuple[bytes, ...]
    secrets: tuple[str, ...]
    concurrency: int
    measure_from: float
    measure_until: float
    stream: bool = False  # time each SSE event
    retry_pause: float = 0.05  # after a non-200, as a polite client backs off
    max_requests: int | None = None  # stop after this many (all processes together)
    keep_latencies: bool = True
    url_secrets: tuple[str, ...] = ()
    url_users: tuple[Any, ...] = ()  # bench.front_end.ForwardedUser or None, per url


@dataclass
class PhaseResult:
    completed: int = 0  # 200s that ended inside the window
    statuses: Counter[int] = field(default_factory=Counter)  # inside the window
    errors: Counter[str] = field(default_factory=Counter)
    latencies: array = field(default_factory=lambda: array("d"))  # seconds, counted 200s
    gaps: Counter[int] = field(default_factory=Counter)  # gap_bin -> count
    gap_sum: float = 0.0  # seconds, for the mean
    events: array = field(default_factory=lambda: array("d"))  # SSE events per stream
    stream_spans: array = field(default_factory=lambda: array("d"))  # first to last event
    ttfts: array = field(default_factory=lambda: array("d"))  # sent to first event
    sent_total: int = 0  # every request, warm-up included
    by_url: dict[int, array] = field(default_factory=dict)  # url index -> latencies, when several

    def merge(self, other: PhaseResult) -> None:
        self.completed += other.completed
        self.statuses.update(other.statuses)
        self.errors.update(other.errors)
        self.latencies.extend(other.latencies)
        self.gaps.update(other.gaps)
        self.gap_sum += other.gap_sum
        self.events.extend(other.events)
        self.stream_spans.extend(other.stream_spans)
        self.ttfts.extend(other.ttfts)
        self.sent_total += other.sent_total
        for url, latencies in other.by_url.items():
            self.by_url.setdefault(url, array("d")).extend(latencies)


class ProtocolError(Exception):
    pass


class HttpConnection:
    """One keep-alive HTTP/1.1 connection, opened again after the server closes it."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.buffer = b""

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None
        self.buffer = b""

    async def _fill(self) -> float:
        assert self.reader is not None
        data = await self.reader.read(262144)
        if not data:
            raise ProtocolError("connection closed by the server")
        self.buffer += data
        return time.perf_counter()

    async def request(self, raw: bytes, stream: bool) -> tuple[int, list[float]]:
        """Send ``raw``; the status and, when ``stream``, each SSE event's arrival time
        (events read in one piece share a time)."""
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
            self.buffer = b""
        self.writer.write(raw)
        while HEAD_END not in self.buffer:
            await self._fill()
        head, _, self.buffer = self.buffer.partition(HEAD_END)
        status = int(head[9:12])
        length: int | None = None
        chunked = close = False
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding":
                chunked = b"chunked" in value.lower()
            elif name == b"connection":
                close = b"close" in value.lower()
        times: list[float] = []
        if chunked:
            await self._chunked(times if stream else None)
        elif length is not None:
            await self._sized(length, times if stream else None)
        else:
            raise ProtocolError("a response with neither Content-Length nor chunked framing")
        if close:
            self.close()
        return status, times

    async def _sized(self, length: int, times: list[float] | None) -> None:
        left, tail = length, b""
        t = time.perf_counter()
        while True:
            piece = self.buffer[:left]
            self.buffer = self.buffer[len(piece):]
            left -= len(piece)
            if times is not None:
                tail = _count_events(tail, piece, t, times)
            if left <= 0:
                return
            t = await self._fill()

    async def _chunked(self, times: list[float] | None) -> None:
        tail = b""
        t = time.perf_counter()
        while True:
            cut = self.buffer.find(b"\r\n")
            if cut < 0:
                t = await self._fill()
                continue
            size = int(self.buffer[:cut].split(b";", 1)[0], 16)
            if size == 0:
                # No server here sends trailers: the body ends with "0\r\n\r\n".
                while len(self.buffer) < cut + 4:
                    t = await self._fill()
                self.buffer = self.buffer[cut + 4:]
                return
            while len(self.buffer) < cut + 2 + size + 2:
                t = await self._fill()
            piece = self.buffer[cut + 2: cut + 2 + size]
            self.buffer = self.buffer[cut + 2 + size + 2:]
            if times is not None:
                tail = _count_events(tail, piece, t, times)


def _count_events(tail: bytes, piece: bytes, at: float, times: list[float]) -> bytes:
    """Append ``at`` once per SSE event that ``piece`` completes; an event's blank line may
    straddle two pieces, so the previous piece's last byte (``tail``) is looked at too."""
    if not piece:
        return tail
    times.extend([at] * (tail + piece).count(EVENT_END))
    return piece[-1:]


def build_request(url: str, path: str, body: bytes, secret: str | None,
                  headers: Mapping[str, str] | None = None) -> bytes:
    lines = [
        f"POST {path} HTTP/1.1",
        f"Host: {urlsplit(url).netloc}",
        "Content-Type: application/json",
        "Accept: */*",
        f"Content-Length: {len(body)}",
    ]
    if secret:
        lines.append(f"Authorization: Bearer {secret}")
    lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


async def _worker(spec: PhaseSpec, index: int, quota: list[int], result: PhaseResult) -> None:
    secret = spec.secrets[index % len(spec.secrets)] if spec.secrets else None
    secrets = spec.url_secrets or (secret,) * len(spec.urls)
    users = spec.url_users or (None,) * len(spec.urls)
    requests = [[build_request(url, spec.path, body, s) for body in spec.bodies]
                for url, s in zip(spec.urls, secrets, strict=True)]
    conns = [HttpConnection(urlsplit(u).hostname or "127.0.0.1", urlsplit(u).port or 80)
             for u in spec.urls]
    counted_always = spec.max_requests is not None
    n = index
    try:
        while True:
            sent = time.perf_counter()
            if sent >= spec.measure_until:
                return
            if counted_always:
                if quota[0] <= 0:
                    return
                quota[0] -= 1
            u = n % len(conns)
            b = (n // len(conns)) % len(spec.bodies)
            raw = requests[u][b]
            if users[u] is not None:
                raw = build_request(spec.urls[u], spec.path, spec.bodies[b], secrets[u], users[u].headers())
                sent = time.perf_counter()
            n += 1
            result.sent_total += 1
            try:
                status, times = await conns[u].request(raw, spec.stream)
            except (OSError, ProtocolError, ValueError, IndexError) as exc:
                conns[u].close()
                if counted_always or sent >= spec.measure_from:
                    result.errors[type(exc).__name__] += 1
                await asyncio.sleep(spec.retry_pause)
                continue
            done = time.perf_counter()
            # Counted by when it ended: with a slow server, dropping the requests in flight at
            # the window's start would undercount its throughput by up to a window's edge.
            inside = counted_always or spec.measure_from <= done <= spec.measure_until
            if inside:
                result.statuses[status] += 1
            if status != 200:
                await asyncio.sleep(spec.retry_pause)
                continue
            if not inside:
                continue
            result.completed += 1
            if spec.keep_latencies:
                result.latencies.append(done - sent)
                if len(conns) > 1:  # requests alternate between the urls: a paired comparison
                    result.by_url.setdefault(u, array("d")).append(done - sent)
            if times:
                result.events.append(len(times))
                result.stream_spans.append(times[-1] - times[0])
                result.ttfts.append(times[0] - sent)
                result.gap_sum += times[-1] - times[0]
                result.gaps.update([gap_bin(b - a) for a, b in itertools.pairwise(times)])
    finally:
        for conn in conns:
            conn.close()


async def run_phases(specs: Sequence[PhaseSpec], index: int, processes: int) -> list[PhaseResult]:
    """Run ``specs`` side by side; this process takes workers index, index + processes, ..."""
    results = [PhaseResult() for _ in specs]
    runs = []
    for spec, result in zip(specs, results, strict=True):
        quota = [0]
        if spec.max_requests is not None:
            quota[0] = spec.max_requests // processes + (index < spec.max_requests % processes)
        runs += [_worker(spec, i, quota, result)
                 for i in range(spec.concurrency) if i % processes == index]
    await asyncio.gather(*runs)
    return results


def _child(conn: Connection, index: int, processes: int) -> None:
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    conn.send("ready")
    while True:
        specs: list[PhaseSpec] | None = conn.recv()
        if specs is None:
            return
        conn.send(asyncio.run(run_phases(specs, index, processes)))


class LoadGenerators:
    """``processes`` spawned load-generator processes, reused phase after phase."""

    def __init__(self, processes: int) -> None:
        self.processes = processes
        self._children: list[tuple[Any, Connection]] = []

    def __enter__(self) -> Self:
        context = multiprocessing.get_context("spawn")
        try:
            for i in range(self.processes):
                parent, child = context.Pipe()
                process = context.Process(target=_child, args=(child, i, self.processes),
                                          daemon=True, name=f"overhead-load-{i}")
                process.start()
                child.close()
                self._children.append((process, parent))
                if not parent.poll(30) or parent.recv() != "ready":
                    raise RuntimeError("a load-generator process did not start")
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def pids(self) -> list[int]:
        return [int(p.pid) for p, _ in self._children]

    def finished(self) -> bool:
        """Whether every process has its results ready (``collect`` would not block)."""
        return all(conn.poll(0) for _, conn in self._children)

    def start(self, *specs: PhaseSpec) -> None:
        """Start phases that run side by side (``collect`` answers in the same order)."""
        for _, conn in self._children:
            conn.send(list(specs))

    def collect(self, timeout: float) -> list[PhaseResult]:
        totals: list[PhaseResult] = []
        for _, conn in self._children:
            if not conn.poll(timeout):
                raise TimeoutError(f"a load generator did not finish within {timeout:.0f} s")
            parts: list[PhaseResult] = conn.recv()
            if not totals:
                totals = parts
            else:
                for total, part in zip(totals, parts, strict=True):
                    total.merge(part)
        return totals

    def close(self) -> None:
        for process, conn in self._children:
            with contextlib.suppress(OSError):
                conn.send(None)
            process.join(5)
            if process.is_alive():
                process.kill()
                process.join(5)
            conn.close()
        self._children = []


def chat_body(model: str, n: int, max_tokens: int, stream: bool) -> bytes:
    """A small chat request, its text varied by ``n`` (no engine or proxy cache can help)."""
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": f"Request {n}: say something about overheads."}],
        "max_tokens": max_tokens,
        "ignore_eos": True,  # a timed enginesim then answers exactly max_tokens (--instant always)
        "stream": stream,
    }
    return json.dumps(body).encode()
