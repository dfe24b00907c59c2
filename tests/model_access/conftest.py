"""A small tree (lab, proj under it, other beside it) for keys in it (tests/support/model_access.py)."""

from __future__ import annotations

import pytest

from fairness.actions import accounts
from fairness.models import Account
from tests.support.audit import SETUP


@pytest.fixture
def lab(tiers) -> Account:
    return accounts.add_account(SETUP, "lab")


@pytest.fixture
def proj(lab) -> Account:
    return accounts.add_account(SETUP, "proj", parent=lab)


@pytest.fixture
def other(tiers) -> Account:
    return accounts.add_account(SETUP, "other")
