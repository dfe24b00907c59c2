"""Another key is answered while 40 MiB of a form streams in, whether the form is one plain file or a
flood of tiny parts (refused after the few parts an upload may have).

That the reader gives the loop a turn after every chunk is counted in test_upload_turns.py; the
latencies here are printed, not asserted: on a box shared with the suite's other worker, a stall
of 130 ms was seen from the client while the gateway's loop itself never lagged 40 ms."""

from __future__ import annotations

import contextlib
import socket
import statistics
import threading
import time
from collections.abc import Callable

import httpx
import pytest

from tests.batch_files.test_limits import read_answer
from tests.support.batch_files import jsonl

MiB = 1024 * 1024
UPLOAD_BYTES = 40 * MiB
TINY_PART = b'--b\r\nContent-Disposition: form-data; name="x"\r\n\r\n\r\n'
MIN_SAMPLES = 20


def many_tiny_parts() -> bytes:
    return TINY_PART * (UPLOAD_BYTES // len(TINY_PART)) + b"--b--\r\n"


def one_plain_file() -> bytes:
    lines = jsonl(1000)
    return (b'--b\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n'
            b'--b\r\nContent-Disposition: form-data; name="file"; filename="big.jsonl"\r\n\r\n'
            + lines * (UPLOAD_BYTES // len(lines)) + b"\r\n--b--\r\n")


class StreamedUpload:
    """A POST /v1/files sent over a socket of its own: one thread writes the body, another reads
    the answer (which may come, and the connection close, before the body has all been sent)."""

    def __init__(self, gateway, secret: str, body: bytes) -> None:
        self.answer = b""
        self.conn = socket.create_connection(("127.0.0.1", gateway.port), timeout=120)
        self.conn.sendall(
            b"POST /v1/files HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + secret.encode()
            + b"\r\nContent-Type: multipart/form-data; boundary=b\r\nContent-Length: " + str(len(body)).encode()
            + b"\r\n\r\n"
        )
        self.started = time.monotonic()
        self.took = 0.0
        self._writer = threading.Thread(target=self._write, args=(body,), daemon=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._writer.start()
        self._reader.start()

    def running(self) -> bool:
        return self._reader.is_alive()

    def close(self) -> None:
        self._reader.join(timeout=120)
        self.conn.close()
        self._writer.join(timeout=10)

    def _write(self, body: bytes) -> None:
        with contextlib.suppress(OSError):  # the gateway answered and closed before reading it all
            self.conn.sendall(body)

    def _read(self) -> None:
        with contextlib.suppress(OSError):
            self.answer = read_answer(self.conn)
        self.took = time.monotonic() - self.started


def models_latencies(gateway, secret: str, while_running: Callable[[], bool]) -> list[float]:
    """Seconds each GET /v1/models took, asked one after another while the upload runs (and
    at least MIN_SAMPLES of them)."""
    latencies: list[float] = []
    with httpx.Client(base_url=gateway.url, headers={"authorization": f"Bearer {secret}"}, timeout=30) as client:
        while while_running() or len(latencies) < MIN_SAMPLES:
            started = time.perf_counter()
            assert client.get("/v1/models").status_code == 200
            latencies.append(time.perf_counter() - started)
    return latencies


@pytest.mark.parametrize(
    ("make_body", "status", "said"),
    [(many_tiny_parts, 400, b"more than 8 parts"), (one_plain_file, 200, b'"object": "file"')],
    ids=["many-tiny-parts", "one-plain-file"],
)
def test_another_key_s_requests_are_answered_while_an_upload_streams(gateway, cast, make_body, status, said):
    body = make_body()
    bob = cast["bob"].secret
    httpx.get(gateway.url + "/v1/models", headers={"authorization": f"Bearer {bob}"}).raise_for_status()  # warm

    upload = StreamedUpload(gateway, cast["alice"].secret, body)
    try:
        latencies = models_latencies(gateway, bob, upload.running)
    finally:
        upload.close()

    p95 = statistics.quantiles(latencies, n=20)[-1]
    measured = (f"upload answered in {upload.took:.2f} s; /v1/models: {len(latencies)} requests, "
                f"p50 {statistics.median(latencies) * 1000:.1f} ms, p95 {p95 * 1000:.1f} ms, "
                f"max {max(latencies) * 1000:.1f} ms")
    print(measured)
    assert upload.answer.startswith(b"HTTP/1.1 %d" % status), upload.answer[:300]
    assert said in upload.answer, upload.answer[:300]
