import pytest

from fairness.portal.actions import Actor, issue_admin_token


@pytest.fixture
def admin_token(staff) -> str:
    return issue_admin_token(Actor(staff), staff, "ci")[1]
