"""Bodies must keep up a minimum pace, and connections that wait on their client (silent, or
trickling headers or a body) cannot take the server from requests that arrive whole: a key's
requests are answered while 1,030 such connections come from the same address."""

from __future__ import annotations

import contextlib
import json
import resource
import selectors
import socket
import statistics
import threading
import time
from dataclasses import dataclass, field

import httpx
import pytest

from fairness.models import BatchFile, BatchFileState
from tests.proxy.test_slow_clients import closed_by_server, error_code, read_response
from tests.support.cast import MODEL
from tests.support.gateway_process import GatewayProcess
from tests.support.polling import wait_for
from tests.support.processes import LOG_DIR, free_port, gateway_env, start_gateway

HEADER_TIMEOUT = 2.0
BODY_GRACE = 2.0
MIN_RATE = 1024  # bytes a second, the default
FLOOD = 1030  # connections: past the 1024 of --limit-concurrency
FLOOD_SECONDS = 6.0  # three header timeouts: the flood is closed and opened again while the key asks


@pytest.fixture(scope="module")
def paced_session(live_db_url, tmp_path_factory):
    """A gateway of its own (its connections are this module's alone) with short client deadlines."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 4 * FLOOD + 256  # both ends of each flood connection, and then some; the gateway inherits it
    if soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(wanted, hard), hard))
    process = start_gateway(
        live_db_url, name="paced", GP_CLIENT_HEADER_TIMEOUT_SECONDS=str(HEADER_TIMEOUT),
        GP_CLIENT_BODY_GRACE_SECONDS=str(BODY_GRACE), GP_CLIENT_MIN_BODY_BYTES_PER_SECOND=str(MIN_RATE),
        GP_BATCH_FILES_DIR=str(tmp_path_factory.mktemp("paced-files")),
    )
    yield process
    process.stop()


@pytest.fixture
def paced(paced_session, transactional_db, redis_url):
    return paced_session


def page_post_head(port: int, length: int) -> bytes:
    return (f"POST /accounts/login/ HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n"
            f"content-type: application/x-www-form-urlencoded\r\ncontent-length: {length}\r\n\r\n").encode()


def upload_head(port: int, secret: str) -> bytes:
    return (f"POST /v1/files HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\nauthorization: Bearer {secret}\r\n"
            "content-type: multipart/form-data; boundary=b\r\ncontent-length: 1000000\r\n\r\n").encode()


def trickle_until_answered(sock: socket.socket, every: float, limit: float) -> tuple[int, dict, bytes, float]:
    """Send a byte every `every` s until the server answers; its answer and when it came."""
    started = time.monotonic()
    while time.monotonic() - started < limit:
        try:
            sock.sendall(b"x")
        except (BrokenPipeError, ConnectionResetError):
            break
        if closed_by_server_or_answered(sock, every):
            break
    sock.settimeout(5)
    status, headers, body = read_response(sock)
    return status, headers, body, time.monotonic() - started


def closed_by_server_or_answered(sock: socket.socket, within: float) -> bool:
    readable = selectors.DefaultSelector()
    readable.register(sock, selectors.EVENT_READ)
    try:
        return bool(readable.select(within))
    finally:
        readable.close()


def test_a_page_body_below_the_pace_gets_408_and_the_connection_closed(paced):
    with socket.create_connection(("127.0.0.1", paced.port), timeout=10) as sock:
        sock.sendall(page_post_head(paced.port, 1_000_000))
        status, headers, body, waited = trickle_until_answered(sock, every=0.5, limit=BODY_GRACE + 10)
        assert status == 408
        assert headers["content-type"].startswith("text/plain")
        assert b"slower than 1024 bytes a second" in body
        assert headers["connection"] == "close"
        assert BODY_GRACE * 0.9 <= waited < BODY_GRACE + 3
        assert closed_by_server(sock, within=3)


def test_an_upload_below_the_pace_gets_an_openai_shaped_408(paced, cast):
    # One byte every 0.5 s: never a gap as long as the 30 s body timeout, always below the pace.
    with socket.create_connection(("127.0.0.1", paced.port), timeout=10) as sock:
        sock.sendall(upload_head(paced.port, cast["alice"].secret))
        status, headers, body, waited = trickle_until_answered(sock, every=0.5, limit=BODY_GRACE + 10)
        assert (status, error_code(body)) == (408, "request_timeout")
        assert json.loads(body)["error"]["type"] == "invalid_request_error"
        assert waited < BODY_GRACE + 3
        assert closed_by_server(sock, within=3)
    # The refused upload gives its reserved room back at once. (Waiting for it also keeps the
    # gateway's DELETE from racing the teardown's TRUNCATE, which PostgreSQL may end as a deadlock.)
    wait_for(lambda: not BatchFile.objects.filter(state=BatchFileState.UPLOADING).exists(), timeout=10,
             what="the refused upload's reservation released")


def test_a_slow_but_steady_body_is_read_whole_and_served(paced, cast, replica):
    """About 2.5 times the minimum pace, for twice the grace and more: the chat is answered."""
    padding = "p" * 12_000
    body = json.dumps({"model": MODEL, "max_tokens": 4, "messages": [
        {"role": "system", "content": padding}, {"role": "user", "content": "hi"}]}).encode()
    rate = 2.5 * MIN_RATE
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1:{paced.port}\r\n"
            f"authorization: Bearer {cast['alice'].secret}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", paced.port), timeout=30) as sock:
        sock.sendall(head)
        started = time.monotonic()
        for offset in range(0, len(body), 256):
            time.sleep(max(0.0, started + offset / rate - time.monotonic()))  # keeps the pace, not a wait
            sock.sendall(body[offset:offset + 256])
        took = time.monotonic() - started
        status, _, answer = read_response(sock)
    assert took > 2 * BODY_GRACE
    assert status == 200, answer
    assert json.loads(answer)["choices"][0]["message"]["content"]


@dataclass
class Flood:
    """`count` connections from 127.0.0.1 that the server waits on for ever: each sends `head` and
    then one byte every `every` s (or, with no head, nothing). One the server closes is opened
    again `reopen_after` s later, so the flood keeps its size."""

    port: int
    head: bytes
    every: float | None
    count: int = FLOOD
    reopen_after: float = 1.0
    addresses: tuple[str, ...] = ("127.0.0.1",)  # where its connections come from, in turn
    opened: int = 0
    closed_by_server: int = 0
    failed_to_open: int = 0
    most_open: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> Flood:
        self._selector = selectors.DefaultSelector()
        self._next_byte: dict[socket.socket, float] = {}
        self._reopen_at: list[float] = []
        for _ in range(self.count):
            self._open()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join(timeout=30)
        for sock in list(self._next_byte):
            self._drop(sock)
        self._selector.close()

    def _open(self) -> None:
        try:
            source = self.addresses[self.opened % len(self.addresses)]
            sock = socket.create_connection(("127.0.0.1", self.port), timeout=2, source_address=(source, 0))
            if self.head:
                sock.sendall(self.head)
        except OSError:
            self.failed_to_open += 1
            self._reopen_at.append(time.monotonic() + self.reopen_after)
            return
        sock.setblocking(False)
        self._selector.register(sock, selectors.EVENT_READ)
        self._next_byte[sock] = time.monotonic() + (self.every or 0)
        self.opened += 1
        self.most_open = max(self.most_open, len(self._next_byte))

    def _drop(self, sock: socket.socket) -> None:
        self._selector.unregister(sock)
        del self._next_byte[sock]
        sock.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            for key, _ in self._selector.select(0.05):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                with contextlib.suppress(OSError):
                    sock.recv(65536)  # an answer (408) or the end: either way the server is done with it
                self._drop(sock)
                self.closed_by_server += 1
                self._reopen_at.append(time.monotonic() + self.reopen_after)
            now = time.monotonic()
            if self.every is not None:
                for sock, due in list(self._next_byte.items()):
                    if due <= now:
                        try:
                            sock.send(b"x")
                        except OSError:
                            continue  # closed: the selector reports it
                        self._next_byte[sock] = now + self.every
            due_now = [at for at in self._reopen_at if at <= now]
            self._reopen_at = [at for at in self._reopen_at if at > now]
            for _ in due_now:
                self._open()


def key_requests_during(gateway, secret: str, seconds: float) -> list[tuple[str, int, float]]:
    """A key's requests, one after another on fresh connections: (what, status, seconds taken)."""
    results = []
    headers = {"authorization": f"Bearer {secret}"}
    chat = {"model": MODEL, "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}
    ended = time.monotonic() + seconds
    while time.monotonic() < ended:
        for what, send in (
            ("models", lambda: httpx.get(gateway.url + "/v1/models", headers=headers, timeout=10)),
            ("chat", lambda: httpx.post(gateway.url + "/v1/chat/completions", headers=headers, json=chat, timeout=10)),
        ):
            started = time.monotonic()
            try:
                status = send().status_code
            except httpx.HTTPError as exc:
                status = f"{type(exc).__name__}"  # type: ignore[assignment]
            results.append((what, status, time.monotonic() - started))
    return results


def summary(results: list[tuple[str, int, float]], flood: Flood) -> str:
    taken = sorted(seconds for _, _, seconds in results)
    statuses: dict[object, int] = {}
    for _, status, _ in results:
        statuses[status] = statuses.get(status, 0) + 1
    return (f"{len(results)} key requests {statuses}, median {statistics.median(taken):.3f} s, "
            f"slowest {taken[-1]:.3f} s; flood: {flood.opened} opened, {flood.closed_by_server} closed by "
            f"the server, {flood.failed_to_open} failed to open, at most {flood.most_open} open at once")


@pytest.mark.long  # the floods test the HTTP server; the database only holds a key
@pytest.mark.parametrize(
    "kind", ["trickled page bodies", "silent connections", "trickled headers", "silent, from five other addresses"],
)
def test_a_keys_requests_are_all_answered_while_1030_connections_wait_on_their_client(paced, cast, replica, kind):
    head, every = {
        "trickled page bodies": (page_post_head(paced.port, 1_000_000), 5.0),
        "silent connections": (b"", None),
        "trickled headers": (f"GET / HTTP/1.1\r\nhost: 127.0.0.1:{paced.port}\r\n".encode(), 0.5),
        "silent, from five other addresses": (b"", None),
    }[kind]
    # Five addresses of 206 each: every one within its cap of 256, together past the 1024 in all.
    addresses = tuple(f"127.0.0.{n}" for n in range(2, 7)) if "addresses" in kind else ("127.0.0.1",)
    # Warm up: the key is looked up and the engine found healthy before the flood.
    chat = {"model": MODEL, "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}
    auth = {"authorization": f"Bearer {cast['alice'].secret}"}
    wait_for(lambda: httpx.post(paced.url + "/v1/chat/completions", headers=auth, json=chat, timeout=10)
             .status_code == 200, what="a chat answered before the flood")
    with Flood(paced.port, head, every, addresses=addresses) as flood:
        assert flood.opened + flood.failed_to_open == FLOOD
        results = key_requests_during(paced, cast["alice"].secret, FLOOD_SECONDS)
    print(f"{kind}: {summary(results, flood)}")
    assert len(results) >= 10, summary(results, flood)
    assert {status for _, status, _ in results} == {200}, summary(results, flood)
    assert flood.opened >= FLOOD, summary(results, flood)
    assert flood.closed_by_server >= FLOOD, summary(results, flood)  # and it was turned over meanwhile


@pytest.mark.long
def test_an_upload_under_way_with_a_valid_key_survives_a_flood_from_its_own_address(paced, cast):
    """The upload waits on its client far longer than any flood connection, so it would be the
    first closed past the cap; its key, checked before its body, keeps it among those served."""
    line = b'{"custom_id": "r", "method": "POST", "url": "/v1/chat/completions", "body": {"model": "sim"}}\n'
    content = line * 800  # about 75 KiB
    form_start = (b'--b\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n'
                  b'--b\r\nContent-Disposition: form-data; name="file"; filename="a.jsonl"\r\n\r\n')
    form_end = b"\r\n--b--\r\n"
    length = len(form_start) + len(content) + len(form_end)
    head = upload_head(paced.port, cast["alice"].secret).replace(b"1000000", str(length).encode())
    rate = 8 * MIN_RATE
    # The key is checked once first, so the upload is vouched for within moments of its headers
    # (a cold lookup on a busy database can take longer than the flood takes to reach the cap).
    warm = httpx.get(f"{paced.url}/v1/models", headers={"Authorization": f"Bearer {cast['alice'].secret}"})
    assert warm.status_code == 200, warm.text
    with socket.create_connection(("127.0.0.1", paced.port), timeout=30) as sock:
        sock.sendall(head + form_start)
        with Flood(paced.port, b"", None) as flood:
            started = time.monotonic()
            for offset in range(0, len(content), 1024):
                time.sleep(max(0.0, started + offset / rate - time.monotonic()))  # keeps the pace, not a wait
                sock.sendall(content[offset:offset + 1024])
            sock.sendall(form_end)
            status, _, answer = read_response(sock)
    print(f"upload during the flood: {status} after {time.monotonic() - started:.1f} s; flood: {flood.opened} "
          f"opened, {flood.closed_by_server} closed by the server")
    assert flood.closed_by_server >= FLOOD  # the flood was closed past the cap, many times over
    assert status == 200, answer
    assert json.loads(answer)["bytes"] == len(content)


def test_pipelined_requests_are_each_answered_on_one_connection(paced, cast):
    """Requests sent back to back before any answer: the server counts each as served in turn."""
    request = (f"GET /v1/models HTTP/1.1\r\nhost: 127.0.0.1:{paced.port}\r\n"
               f"authorization: Bearer {cast['alice'].secret}\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", paced.port), timeout=10) as sock:
        answers = sock.makefile("rb")
        sock.sendall(request * 3)
        statuses = [read_status(answers) for _ in range(3)]
        sock.sendall(request)  # and the connection is still good for another
        statuses.append(read_status(answers))
    assert statuses == [200, 200, 200, 200]


def read_status(answers) -> int:
    """The status of the next response on a connection read as a file, its body skipped."""
    status = int(answers.readline().split()[1])
    length = 0
    while (line := answers.readline()) not in (b"\r\n", b""):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    answers.read(length)
    return status


@pytest.fixture
def narrow(live_db_url, transactional_db, redis_url):
    """A gateway that serves two requests at a time (--limit-concurrency 2)."""
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    port = free_port()
    process = GatewayProcess(port, gateway_env(live_db_url), LOG_DIR / f"narrow-{port}.log", limit_concurrency=2)
    yield process
    process.stop()


def test_the_concurrency_limit_counts_requests_served_not_connections_waiting(narrow, cast, sim, replica):
    auth = {"authorization": f"Bearer {cast['alice'].secret}"}
    silent = [socket.create_connection(("127.0.0.1", narrow.port), timeout=10) for _ in range(20)]
    stalled: list[socket.socket] = []
    try:
        # Twenty connections that send nothing, with a limit of two: a key's request is served.
        assert httpx.get(narrow.url + "/v1/models", headers=auth, timeout=10).status_code == 200
        wait_for(lambda: httpx.post(narrow.url + "/v1/chat/completions", headers=auth, timeout=10, json={
            "model": MODEL, "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}).status_code == 200,
            what="the engine in use")
        # Two chats the engine never answers are two requests served: a third is one too many.
        sim.set_faults(stall=True)
        chat = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}).encode()
        for member in ("alice", "bob"):
            sock = socket.create_connection(("127.0.0.1", narrow.port), timeout=10)
            sock.sendall(
                f"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer "
                f"{cast[member].secret}\r\ncontent-type: application/json\r\ncontent-length: {len(chat)}\r\n\r\n"
                .encode() + chat
            )
            stalled.append(sock)
        busy = wait_for(
            lambda: (r := httpx.get(narrow.url + "/v1/models", headers=auth, timeout=10)).status_code == 503 and r,
            what="a 503 past the limit",
        )
        assert busy.json()["error"]["code"] == "server_busy"
        assert busy.json()["error"]["type"] == "service_unavailable"
        assert busy.headers["retry-after"] == "1"
        page = httpx.get(narrow.url + "/capacity/", timeout=10)
        assert (page.status_code, page.headers["content-type"]) == (503, "text/plain; charset=utf-8")
    finally:
        sim.set_faults(stall=False)
        for sock in silent + stalled:
            sock.close()
