import pytest

from fairness.actions.audit import Actor
from fairness.actions.tokens import issue_admin_token


@pytest.fixture
def admin_token(staff) -> str:
    return issue_admin_token(Actor(staff), staff, "ci")[1]
