"""sshare: Slurm's `sshare -l` table of the tree, with shares normalised down it and usage read
live from Redis; --json gives the same rows as the admin API."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command

from fairness.actions import accounts
from tests.support.accounts import charge
from tests.support.audit import SETUP

pytestmark = pytest.mark.django_db(transaction=True)

COLUMNS = ["Account", "User", "RawShares", "NormShares", "RawUsage", "EffectvUsage", "FairShare"]


def sshare(*args: str) -> str:
    out = io.StringIO()
    call_command("sshare", *args, stdout=out)
    return out.getvalue()


def rows_as_json() -> list[dict]:
    return json.loads(sshare("--json"))


def by_name(rows: list[dict]) -> dict[tuple[str, str], dict]:
    return {(row["account"], row["user"]): row for row in rows}


def test_it_prints_sshares_columns_with_accounts_indented_and_members_under_them(tree):
    accounts.add_account(SETUP, "proj", parent=tree.lab, shares=2)
    heading, rule, *lines = sshare().splitlines()
    assert heading.split() == COLUMNS
    assert set(rule) == {"-", " "}
    assert [line.split()[:2] for line in lines] == [
        ["lab", "3"], ["lab", "alice"], ["lab", "bob"], ["proj", "2"], ["other", "1"], ["other", "carol"],
    ]
    indent = {line.split()[0] + "/" + line.split()[1]: len(line) - len(line.lstrip()) for line in lines}
    assert indent == {"lab/3": 0, "lab/alice": 1, "lab/bob": 1, "proj/2": 1, "other/1": 0, "other/carol": 1}


def test_shares_are_normalised_down_the_tree(tree):
    rows = by_name(rows_as_json())
    assert rows["lab", ""]["norm_shares"] == pytest.approx(0.75)  # 3 of 3 + 1
    assert rows["other", ""]["norm_shares"] == pytest.approx(0.25)
    assert rows["lab", "alice"]["norm_shares"] == pytest.approx(0.375)  # half of lab's
    assert rows["lab", "bob"]["norm_shares"] == pytest.approx(0.375)
    assert rows["other", "carol"]["norm_shares"] == pytest.approx(0.25)
    assert [(r["account"], r["user"], r["depth"]) for r in rows_as_json()] == [
        ("lab", "", 0), ("lab", "alice", 1), ("lab", "bob", 1), ("other", "", 0), ("other", "carol", 1),
    ]


def test_a_member_with_more_shares_gets_more_of_the_accounts(tree, people):
    accounts.add_member(SETUP, tree.lab, people["alice"], shares=3)
    rows = by_name(rows_as_json())
    assert rows["lab", "alice"]["norm_shares"] == pytest.approx(0.75 * 3 / 4)
    assert rows["lab", "bob"]["norm_shares"] == pytest.approx(0.75 / 4)


def test_with_no_usage_everyone_stands_at_one(tree):
    for row in rows_as_json():
        assert (row["raw_usage"], row["effective_usage"], row["fair_share"]) == (0.0, 0.0, 1.0)


def test_usage_lowers_the_fair_share_of_whoever_used_more_than_their_share(tree):
    charge((tree.alice, 300.0), (tree.carol, 100.0))
    rows = by_name(rows_as_json())
    approx = pytest.approx  # usage decays (a week's half-life) in the moments between charge and read

    # alice: U = 300/400 = 0.75 against S = 0.375, so F = 2^-2; lab sums its members' usage.
    assert rows["lab", "alice"]["effective_usage"] == approx(0.75, rel=1e-4)
    assert rows["lab", "alice"]["fair_share"] == approx(0.25, rel=1e-4)
    assert rows["lab", "bob"]["fair_share"] == 1.0
    assert rows["lab", ""]["raw_usage"] == approx(300.0, rel=1e-4)
    assert rows["lab", ""]["fair_share"] == approx(0.5, rel=1e-4)  # U 0.75 = S 0.75: exactly its share
    assert rows["other", "carol"]["fair_share"] == approx(0.5, rel=1e-4)
    line = next(line for line in sshare().splitlines() if "alice" in line)
    assert line.split()[2:] == ["1", "0.375000", "300", "0.750000", "0.250000"]


def test_an_empty_tree_says_how_to_start():
    assert "manage.py add_account" in sshare()
    assert rows_as_json() == []
