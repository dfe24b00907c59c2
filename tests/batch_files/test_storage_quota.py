"""One person's file count and bytes hold however many uploads arrive at once, through any number
of gateway processes: an upload reserves its room before its body is read, and gives it back when
it fails. Batch results count against the bytes too."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from django.contrib.auth import get_user_model

from fairness.models import BatchFile, BatchFileState
from tests.batch_files.test_hostile_input import upload
from tests.batch_files.test_limits import FIRST_LINE, _send_chunk, _start_streaming_upload, answer_before_the_body
from tests.support.batch_files import files_on_disk, jsonl
from tests.support.gateway_process import GatewayProcess
from tests.support.polling import wait_for
from tests.support.processes import start_gateway

FILES = 4
QUOTA = 40 * 1024
UPLOADS_AT_ONCE = 12


@pytest.fixture(scope="module")
def two_gateways(live_db_url: str, batch_files_dir: Path) -> Iterator[list[GatewayProcess]]:
    """Two gateway processes over one database and one storage, with small limits."""
    env = {"GP_BATCH_FILES_DIR": str(batch_files_dir), "GP_MAX_BATCH_FILES_PER_USER": str(FILES),
           "GP_STORAGE_QUOTA_BYTES_PER_USER": str(QUOTA)}
    processes = [start_gateway(live_db_url, name=f"gateway-quota-{n}", **env) for n in range(2)]
    yield processes
    for process in processes:
        process.stop()


@pytest.fixture
def gateways(two_gateways, transactional_db, redis_url) -> list[GatewayProcess]:
    return two_gateways


def assert_refused(response: httpx.Response, status: int, code: str) -> dict:
    """An OpenAI-shaped refusal with this status and code, naming the setting that sets the limit."""
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["code"] == code
    assert error["type"] == "permission_error" and "GP_" in error["message"]
    return error


def padded(size: int) -> bytes:
    """A JSONL file of exactly `size` bytes."""
    return FIRST_LINE + b" " * (size - len(FIRST_LINE))


def upload_all_at_once(gateways: list[GatewayProcess], secret: str, contents: list[bytes]) -> list[httpx.Response]:
    """Each upload from a thread of its own, all let go together, spread over the gateways."""
    start = threading.Barrier(len(contents))

    def send(n: int) -> httpx.Response:
        start.wait()
        return upload(gateways[n % len(gateways)], secret, contents[n], filename=f"{n}.jsonl")

    with ThreadPoolExecutor(len(contents)) as pool:
        return list(pool.map(send, range(len(contents))))


def test_twelve_uploads_at_once_through_two_gateways_keep_the_file_limit(gateways, cast, stored_files):
    answers = upload_all_at_once(gateways, cast["alice"].secret, [jsonl()] * UPLOADS_AT_ONCE)
    stored = [answer for answer in answers if answer.status_code == 200]
    refused = [answer for answer in answers if answer.status_code != 200]
    assert len(stored) == FILES, [answer.status_code for answer in answers]
    for answer in refused:
        assert_refused(answer, 403, "file_limit_reached")
    assert BatchFile.objects.filter(state=BatchFileState.STORED).count() == FILES
    assert len(files_on_disk(stored_files)) == FILES
    assert not BatchFile.objects.filter(state=BatchFileState.UPLOADING).exists()  # every refusal gave its room back


def test_twelve_uploads_at_once_never_pass_the_byte_quota(gateways, cast, stored_files):
    size = 15 * 1024  # two fit in the 40 KiB quota, a third does not
    answers = upload_all_at_once(gateways, cast["alice"].secret, [padded(size)] * UPLOADS_AT_ONCE)
    stored = [answer for answer in answers if answer.status_code == 200]
    assert len(stored) == 2, [answer.status_code for answer in answers]
    codes = set()
    for answer in answers:
        if answer.status_code != 200:
            # Uploads under way count as files too, so a few meet the file limit first.
            codes.add(answer.json()["error"]["code"])
            assert_refused(answer, 403, answer.json()["error"]["code"])
    assert "storage_quota_exceeded" in codes and codes <= {"storage_quota_exceeded", "file_limit_reached"}
    assert sum(row.bytes for row in BatchFile.objects.all()) == 2 * size <= QUOTA
    wait_for(lambda: len(files_on_disk(stored_files)) == 2, what="partial files deleted")


def test_results_count_and_an_upload_past_the_quota_is_refused_before_its_body(gateways, cast, stored_files):
    alice = get_user_model().objects.get(username="alice")
    BatchFile.objects.create(public_id="file-results", owner=alice, purpose="batch_output", filename="r.jsonl",
                             bytes=QUOTA - 1024, stored_name="aa/results.jsonl")
    answer = answer_before_the_body(gateways[0], cast["alice"].secret, 30_000)  # no body sent: answered anyway
    assert answer.startswith(b"HTTP/1.1 403") and b"storage_quota_exceeded" in answer
    # A file that passes the room left while it streams stops there, and leaves nothing.
    assert_refused(upload(gateways[1], cast["alice"].secret, padded(4096)), 403, "storage_quota_exceeded")
    assert files_on_disk(stored_files) == [] and BatchFile.objects.count() == 1
    assert upload(gateways[0], cast["bob"].secret, padded(4096)).status_code == 200  # per person


def test_no_batch_starts_while_a_persons_files_fill_their_quota(gateways, cast):
    alice = get_user_model().objects.get(username="alice")
    response = upload(gateways[0], cast["alice"].secret, jsonl())
    assert response.status_code == 200, response.text
    BatchFile.objects.create(public_id="file-results", owner=alice, purpose="batch_output", filename="r.jsonl",
                             bytes=QUOTA, stored_name="aa/results.jsonl")
    created = httpx.post(gateways[1].url + "/v1/batches", headers={"authorization": f"Bearer {cast['alice'].secret}"},
                         json={"input_file_id": response.json()["id"], "endpoint": "/v1/chat/completions",
                               "completion_window": "24h"})
    assert_refused(created, 403, "storage_quota_exceeded")


def test_an_upload_holds_its_room_while_it_streams_and_gives_it_back_when_its_client_leaves(
    gateways, cast, stored_files
):
    conn = _start_streaming_upload(gateways[0], cast["alice"].secret)  # no declared length: the room left
    with conn:
        _send_chunk(conn, b"x" * 1024)
        wait_for(lambda: files_on_disk(stored_files), what="the upload to begin")
        assert_refused(upload(gateways[1], cast["alice"].secret, padded(4096)), 403, "storage_quota_exceeded")
    wait_for(lambda: not BatchFile.objects.exists(), what="the reservation given back")
    wait_for(lambda: files_on_disk(stored_files) == [], what="the partial file deleted")
    assert upload(gateways[1], cast["alice"].secret, padded(4096)).status_code == 200


def test_a_running_batchs_lines_hold_its_input_after_the_file_is_deleted(gateways, cast):
    size, secret = 15 * 1024, cast["alice"].secret
    first = upload(gateways[0], secret, padded(size)).json()["id"]
    created = httpx.post(gateways[0].url + "/v1/batches", headers={"authorization": f"Bearer {secret}"},
                         json={"input_file_id": first, "endpoint": "/v1/chat/completions", "completion_window": "24h"})
    assert created.status_code == 200, created.text
    deleted = httpx.delete(gateways[1].url + f"/v1/files/{first}", headers={"authorization": f"Bearer {secret}"})
    assert deleted.status_code == 200 and deleted.json()["deleted"]
    # Its lines still hold those 15 KiB until the batch ends: one more file fits, not two.
    assert upload(gateways[1], secret, padded(size)).status_code == 200
    assert_refused(upload(gateways[0], secret, padded(size)), 403, "storage_quota_exceeded")
