"""An upload is streamed to storage, never held: past the limit it stops at once with 413 and
leaves nothing behind, and a 200 MiB upload barely moves the gateway's memory."""

from __future__ import annotations

import select
import socket
import time
from pathlib import Path

import httpx
import openai
import pytest

from fairness.models import BatchFile
from tests.support.batch_files import BODY_TIMEOUT, FILE_LIMIT, FILES_PER_USER, files_on_disk, jsonl
from tests.support.polling import wait_for

MiB = 1024 * 1024
FIRST_LINE = b'{"custom_id": "0", "method": "POST", "url": "/v1/chat/completions", "body": {}}\n'


def jsonl_file(path: Path, size: int) -> Path:
    """A JSONL file of exactly `size` bytes (a request per line, the last padded)."""
    line = FIRST_LINE
    with path.open("wb") as out:
        whole, rest = divmod(size, len(line))
        for _ in range(whole):
            out.write(line)
        out.write(b" " * rest)
    return path


def rss_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} for {pid}")


def test_a_file_just_over_the_limit_gets_413_and_leaves_nothing(openai_for, cast, stored_files, tmp_path):
    client = openai_for(cast["alice"])
    with jsonl_file(tmp_path / "big.jsonl", FILE_LIMIT + 1).open("rb") as big, \
            pytest.raises(openai.APIStatusError) as refused:
        client.files.create(file=big, purpose="batch")
    assert refused.value.status_code == 413
    assert refused.value.body["code"] == "file_too_large" and "202 MiB" in refused.value.body["message"]
    assert files_on_disk(stored_files) == [] and not BatchFile.objects.exists()

    with jsonl_file(tmp_path / "fits.jsonl", FILE_LIMIT).open("rb") as fits:
        assert client.files.create(file=fits, purpose="batch").bytes == FILE_LIMIT


def answer_before_the_body(gateway, secret: str, declared_length: int) -> bytes:
    """The answer to an upload's headers alone, declaring a body of this length never sent."""
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as conn:
        conn.sendall(
            b"POST /v1/files HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + secret.encode()
            + b"\r\nContent-Type: multipart/form-data; boundary=b\r\nContent-Length: %d\r\n\r\n" % declared_length
        )
        return read_answer(conn)


def test_a_declared_length_past_the_limit_is_refused_before_the_body(gateway, cast):
    answer = answer_before_the_body(gateway, cast["alice"].secret, 1_000_000_000_000)
    assert answer.startswith(b"HTTP/1.1 413") and b"request_too_large" in answer


def read_answer(conn: socket.socket) -> bytes:
    """One whole HTTP response (it comes in several writes: the head, then the body)."""
    answer = b""
    while b"\r\n\r\n" not in answer or len(answer.partition(b"\r\n\r\n")[2]) < _length(answer):
        piece = conn.recv(65536)
        if not piece:
            break
        answer += piece
    return answer


def _length(answer: bytes) -> int:
    for line in answer.partition(b"\r\n\r\n")[0].split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.lower() == b"content-length":
            return int(value)
    return 0


def _start_streaming_upload(gateway, secret: str) -> socket.socket:
    conn = socket.create_connection(("127.0.0.1", gateway.port), timeout=10)
    conn.sendall(
        b"POST /v1/files HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + secret.encode()
        + b"\r\nContent-Type: multipart/form-data; boundary=b\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    _send_chunk(conn, b'--b\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n'
                      b'--b\r\nContent-Disposition: form-data; name="file"; filename="a.jsonl"\r\n\r\n' + FIRST_LINE)
    return conn


def _send_chunk(conn: socket.socket, data: bytes) -> None:
    conn.sendall(b"%x\r\n%s\r\n" % (len(data), data))


def test_an_upload_with_no_length_stops_being_read_once_past_the_limit(gateway, cast, stored_files):
    conn = _start_streaming_upload(gateway, cast["alice"].secret)
    sent, piece = 0, (b"x" * 1023 + b"\n") * 1024  # a MiB of lines, each far within GP_BATCH_MAX_LINE_BYTES
    with conn:
        while not select.select([conn], [], [], 0)[0]:
            assert sent < FILE_LIMIT + 16 * MiB, "still reading long past the limit"
            _send_chunk(conn, piece)
            sent += len(piece)
        answer = read_answer(conn)
    assert answer.startswith(b"HTTP/1.1 413") and b"file_too_large" in answer
    assert sent >= FILE_LIMIT - MiB
    wait_for(lambda: files_on_disk(stored_files) == [], what="the partial file deleted")


def test_a_client_that_leaves_mid_upload_leaves_nothing(gateway, cast, stored_files):
    conn = _start_streaming_upload(gateway, cast["alice"].secret)
    with conn:
        _send_chunk(conn, b"x" * MiB)
        wait_for(lambda: files_on_disk(stored_files), what="the upload to begin")
    # The file goes first, then the row that reserved its room: wait for both.
    wait_for(lambda: files_on_disk(stored_files) == [] and not BatchFile.objects.exists(),
             what="the partial file and its reservation deleted")


def test_an_upload_that_stalls_gets_408_and_leaves_nothing(gateway, cast, stored_files):
    conn = _start_streaming_upload(gateway, cast["alice"].secret)
    with conn:
        started = time.monotonic()
        conn.settimeout(BODY_TIMEOUT + 10)
        answer = read_answer(conn)
    assert answer.startswith(b"HTTP/1.1 408") and b"connection: close" in answer.lower()
    assert time.monotonic() - started >= BODY_TIMEOUT - 0.5
    wait_for(lambda: files_on_disk(stored_files) == [], what="the partial file deleted")


def test_a_200_mib_upload_keeps_the_gateways_memory_within_a_tenth_of_idle(openai_for, cast, gateway, tmp_path):
    client = openai_for(cast["alice"])
    client.files.create(file=("warm.jsonl", jsonl()), purpose="batch")  # first-use imports and pools
    path = jsonl_file(tmp_path / "two-hundred.jsonl", 200 * MiB)
    pid = gateway.process.pid
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # the peak (VmHWM) starts again from now
    idle = rss_kib(pid, "VmRSS")
    with path.open("rb") as upload:
        assert client.files.create(file=upload, purpose="batch").bytes == 200 * MiB
    peak = rss_kib(pid, "VmHWM")
    assert peak <= idle * 1.10, f"the gateway's peak memory grew {(peak - idle) / 1024:.1f} MiB over a 200 MiB upload"


def test_one_person_keeps_at_most_the_files_allowed(openai_for, cast):
    client = openai_for(cast["alice"])
    ids = [client.files.create(file=(f"{n}.jsonl", jsonl()), purpose="batch").id for n in range(FILES_PER_USER)]
    with pytest.raises(openai.PermissionDeniedError) as refused:
        client.files.create(file=("one-more.jsonl", jsonl()), purpose="batch")
    assert refused.value.body["code"] == "file_limit_reached"
    assert openai_for(cast["bob"]).files.create(file=("bobs.jsonl", jsonl()), purpose="batch")  # per person
    client.files.delete(ids[0])
    assert client.files.create(file=("now-it-fits.jsonl", jsonl()), purpose="batch").id


def test_the_quota_is_checked_before_the_body_is_read(gateway, cast, openai_for):
    client = openai_for(cast["alice"])
    for n in range(FILES_PER_USER):
        client.files.create(file=(f"{n}.jsonl", jsonl()), purpose="batch")
    response = httpx.post(gateway.url + "/v1/files", headers={"authorization": f"Bearer {cast['alice'].secret}"},
                          data={"purpose": "batch"}, files={"file": ("x.jsonl", jsonl())})
    assert response.status_code == 403
