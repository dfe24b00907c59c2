"""Usernames through the admin API: one differing from a taken one only in case is taken too."""

import json

import pytest
from django.contrib.auth import get_user_model

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize("name", ["alice", "Alice", "ALICE"])
def test_a_name_taken_in_any_case_is_a_409(staff_client, cast, name):
    response = staff_client.post("/api/admin/users", data=json.dumps({"username": name}),
                                 content_type="application/json")
    assert response.status_code == 409, response.content
    assert get_user_model().objects.filter(username__iexact="alice").count() == 1
