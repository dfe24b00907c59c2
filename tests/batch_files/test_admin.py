"""Staff read batch files in the Django admin and change nothing there."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.test import Client

from fairness.models import BatchFile


def test_the_admin_lists_batch_files_read_only(tiers):
    staff = get_user_model().objects.create_superuser("root", password="a long admin password")
    owner = get_user_model().objects.create_user("alice")
    row = BatchFile.objects.create(public_id="file-" + "a" * 24, owner=owner, purpose="batch",
                                   filename="requests.jsonl", bytes=12, stored_name="ab/abc.jsonl")
    client = Client()
    client.force_login(staff)
    listing = client.get("/admin/fairness/batchfile/")
    assert listing.status_code == 200 and b"requests.jsonl" in listing.content
    assert b"ab/abc.jsonl" not in client.get(f"/admin/fairness/batchfile/{row.pk}/change/").content
    assert client.get("/admin/fairness/batchfile/add/").status_code == 403
    assert client.post(f"/admin/fairness/batchfile/{row.pk}/delete/", {"post": "yes"}).status_code == 403
    assert BatchFile.objects.filter(pk=row.pk).exists()
