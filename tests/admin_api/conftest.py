import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from fairness.operations import Actor, issue_admin_token


@pytest.fixture
def staff(tiers):
    return get_user_model().objects.create_user("sam", password="a long staff password", is_staff=True)


@pytest.fixture
def staff_client(staff) -> Client:
    client = Client()
    client.force_login(staff)
    return client


@pytest.fixture
def researcher_client(cast) -> Client:
    client = Client()
    client.force_login(get_user_model().objects.get(username="alice"))
    return client


@pytest.fixture
def admin_token(staff) -> str:
    return issue_admin_token(Actor(staff), staff, "ci")[1]
