"""The models and their migrations agree: a model changed without its migration fails here, before
a deployment's `migrate` would find nothing to do and its database would not match the code."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command


@pytest.mark.django_db
def test_every_model_change_has_its_migration() -> None:
    out = StringIO()
    try:
        call_command("makemigrations", "fairness", "--check", "--dry-run", stdout=out, stderr=out)
    except SystemExit:
        pytest.fail(f"models changed without a migration (run makemigrations):\n{out.getvalue()}")
