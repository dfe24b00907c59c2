"""/me/batches/: a researcher's own batches with their progress and result files, nobody else's."""

from __future__ import annotations

import asyncio
import re

import pytest
from django.contrib.auth import get_user_model
from django.test import AsyncClient, Client

from fairness.models import AuditEntry, Batch, BatchStatus
from tests.support.batch_rows import carol_key, make_batch, stored_file

pytestmark = pytest.mark.django_db(transaction=True)

RESULTS = b'{"id": "batch_req_1", "custom_id": "req-0", "response": {"status_code": 200}}\n'


def test_the_owner_sees_each_batch_with_its_progress_and_time_left(carol_client, cast):
    key = carol_key(cast)
    # 60 lines in the last 5 minutes is one every 5 s: the 377 left take about 31 minutes.
    running = make_batch(key, done=120, failed=3, pending=377, lately=60)
    ended = make_batch(key, BatchStatus.COMPLETED, done=2)
    Batch.objects.filter(pk=ended.pk).update(total=2, completed=2)

    html = carol_client.get("/me/batches/").content.decode()

    assert "120 done, 3 failed of 500" in html
    assert "about 31 min left" in html
    assert 'role="progressbar"' in html and 'aria-valuenow="123"' in html and 'aria-valuemax="500"' in html
    assert "running" in html and "finished" in html and "/v1/chat/completions" in html
    # Newest first.
    assert html.index(ended.public_id) < html.index(running.public_id)
    # Only a batch that can still stop offers to.
    assert f"/me/batches/{running.public_id}/cancel/" in html
    assert f"/me/batches/{ended.public_id}/cancel/" not in html


def test_another_researcher_sees_none_of_them(researcher_client, cast):
    batch = make_batch(carol_key(cast), done=1, pending=1)
    html = researcher_client.get("/me/batches/").content.decode()
    assert batch.public_id not in html
    assert "No batches yet" in html


def test_a_failed_batch_says_why(carol_client, cast):
    make_batch(carol_key(cast), BatchStatus.FAILED,
               errors={"object": "list", "data": [{"code": "invalid_json_line", "line": 3,
                                                   "message": "Line 3 is not valid JSON."}]})
    html = carol_client.get("/me/batches/").content.decode()
    assert "failed" in html and "Line 3 is not valid JSON." in html


async def download(user_name: str, url: str):
    from asgiref.sync import sync_to_async

    client = AsyncClient()
    await client.aforce_login(await sync_to_async(get_user_model().objects.get)(username=user_name))
    return await client.get(url)


def links_to_files(html: str) -> list[str]:
    return re.findall(r'href="(/me/files/[^"]+/content)"', html)


def test_the_owner_downloads_their_results_and_errors(carol_client, cast):
    key = carol_key(cast)
    output = stored_file(key.owner_id, RESULTS)
    errors = stored_file(key.owner_id, b'{"custom_id": "req-1", "error": {"code": "refused"}}\n', "batch_output")
    make_batch(key, BatchStatus.COMPLETED, done=1, output_file=output, error_file=errors)

    html = carol_client.get("/me/batches/").content.decode()
    assert links_to_files(html) == [f"/me/files/{output.public_id}/content", f"/me/files/{errors.public_id}/content"]
    assert "Download results" in html and "Download errors" in html

    response = asyncio.run(download("carol", f"/me/files/{output.public_id}/content"))
    assert response.status_code == 200
    assert response["Content-Disposition"] == f'attachment; filename="{output.public_id}.jsonl"'
    assert response["Content-Length"] == str(len(RESULTS))
    assert "no-store" in response["Cache-Control"]

    async def body() -> bytes:
        return b"".join([chunk async for chunk in response.streaming_content])

    assert asyncio.run(body()) == RESULTS


def test_someone_elses_file_is_not_found(cast):
    output = stored_file(carol_key(cast).owner_id, RESULTS)
    response = asyncio.run(download("alice", f"/me/files/{output.public_id}/content"))
    assert response.status_code == 404
    assert RESULTS not in response.content
    assert asyncio.run(download("alice", "/me/files/file-nothing/content")).status_code == 404
    # Signed out: to the sign-in page first.
    anonymous = Client().get(f"/me/files/{output.public_id}/content")
    assert anonymous.status_code == 302 and anonymous["Location"].startswith("/accounts/login/")


def test_the_owner_cancels_after_confirming_and_it_is_audited(carol_client, cast):
    batch = make_batch(carol_key(cast), done=3, pending=5)
    url = f"/me/batches/{batch.public_id}/cancel/"

    confirm = carol_client.get(url)
    assert confirm.status_code == 200 and "Cancel batch" in confirm.content.decode()
    batch.refresh_from_db()
    assert batch.status == BatchStatus.IN_PROGRESS  # looking at the question changes nothing

    done = carol_client.post(url, follow=True)

    batch.refresh_from_db()
    assert batch.status == BatchStatus.CANCELLING and batch.cancelling_at is not None
    assert done.redirect_chain == [("/me/batches/", 302)]
    assert f"Cancelling {batch.public_id}" in done.content.decode()
    entry = AuditEntry.objects.get(action="batch.cancel")
    assert (entry.actor_name, entry.target, entry.detail["owner"]) == ("carol", batch.public_id, "carol")


def test_nobody_else_can_cancel_a_researchers_batch(researcher_client, cast):
    batch = make_batch(carol_key(cast), pending=5)
    assert researcher_client.get(f"/me/batches/{batch.public_id}/cancel/").status_code == 404
    assert researcher_client.post(f"/me/batches/{batch.public_id}/cancel/").status_code == 404
    batch.refresh_from_db()
    assert batch.status == BatchStatus.IN_PROGRESS
    assert not AuditEntry.objects.exists()


def test_the_cancel_form_needs_its_csrf_token(cast):
    batch = make_batch(carol_key(cast), pending=5)
    client = Client(enforce_csrf_checks=True)
    client.force_login(get_user_model().objects.get(username="carol"))
    assert client.post(f"/me/batches/{batch.public_id}/cancel/").status_code == 403
    batch.refresh_from_db()
    assert batch.status == BatchStatus.IN_PROGRESS


def test_the_navigation_leads_to_my_batches(carol_client):
    assert 'href="/me/batches/"' in carol_client.get("/me/").content.decode()
    assert 'href="/me/batches/" aria-current="page"' in carol_client.get("/me/batches/").content.decode()
