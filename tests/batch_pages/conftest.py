"""Batches as the runner leaves them, made straight in the database (tests/support/batch_rows.py):
carol (the batch tier) owns them, alice is another researcher, sam is staff. Result files go to a
directory of the test's own."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.test import Client


@pytest.fixture(autouse=True)
def stored_files(tmp_path: Path, settings) -> Path:
    settings.STORAGES = {
        **settings.STORAGES,
        "batch_files": {"BACKEND": "django.core.files.storage.FileSystemStorage",
                        "OPTIONS": {"location": str(tmp_path / "batch-files")}},
    }
    return tmp_path / "batch-files"


@pytest.fixture
def carol_client(cast) -> Client:
    client = Client()
    client.force_login(get_user_model().objects.get(username="carol"))
    return client
