"""sshare: Slurm's `sshare -l` table of the tree, with shares normalised down it and usage read
live from Redis; --json gives the same rows as the admin API."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import CommandError, call_command

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


def test_it_prints_sshares_columns_with_accounts_indented_under_root_and_members_under_them(tree):
    accounts.add_account(SETUP, "proj", parent=tree.lab, shares=2)
    heading, rule, *lines = sshare().splitlines()
    assert heading.split() == COLUMNS
    assert set(rule) == {"-", " "}
    assert [line.split()[:2] for line in lines] == [
        ["root", "1.000000"],
        ["lab", "3"], ["lab", "alice"], ["lab", "bob"], ["proj", "2"], ["other", "1"], ["other", "carol"],
    ]
    indent = {line.split()[0] + "/" + line.split()[1]: len(line) - len(line.lstrip()) for line in lines}
    assert indent == {"root/1.000000": 0, "lab/3": 1, "lab/alice": 2, "lab/bob": 2, "proj/2": 2, "other/1": 1,
                      "other/carol": 2}


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


LONG = ["Account", "User", "RawShares", "NormShares", "RawUsage", "NormUsage", "EffectvUsage", "FairShare",
        "LevelFS"]


@pytest.fixture
def used(tree):
    """alice 300 and carol 100 weighted tokens: U 0.75 against S 0.375, and 0.25 against 0.25."""
    charge((tree.alice, 300.0), (tree.carol, 100.0))
    return tree


def test_long_adds_norm_usage_and_level_fs_where_slurm_puts_them(used):
    heading, _, root, *lines = sshare("-l").splitlines()
    assert heading.split() == LONG
    assert root.split() == ["root", "1.000000", "400", "1.000000", "1.000000"]
    alice = next(line for line in lines if "alice" in line)
    assert alice.split()[2:] == ["1", "0.375000", "300", "0.750000", "0.750000", "0.250000", "0.500000"]
    bob = next(line for line in lines if "bob" in line)
    assert bob.split()[-1] == "inf"  # nothing used: first among his siblings


def test_parsable_ends_every_line_with_a_bar(used):
    assert sshare("-p").splitlines() == [
        "Account|User|RawShares|NormShares|RawUsage|EffectvUsage|FairShare|",
        "root|||1.000000|400|1.000000||",
        " lab||3|0.750000|300|0.750000|0.500000|",
        "  lab|alice|1|0.375000|300|0.750000|0.250000|",
        "  lab|bob|1|0.375000|0|0.000000|1.000000|",
        " other||1|0.250000|100|0.250000|0.500000|",
        "  other|carol|1|0.250000|100|0.250000|0.500000|",
    ]


def test_parsable2_long_has_no_bar_at_the_end_and_noheader_drops_the_heading(used):
    lines = sshare("--parsable2", "--long").splitlines()
    assert lines == [
        "Account|User|RawShares|NormShares|RawUsage|NormUsage|EffectvUsage|FairShare|LevelFS",
        "root|||1.000000|400|1.000000|1.000000||",
        " lab||3|0.750000|300|0.750000|0.750000|0.500000|1.000000",
        "  lab|alice|1|0.375000|300|0.750000|0.750000|0.250000|0.500000",
        "  lab|bob|1|0.375000|0|0.000000|0.000000|1.000000|inf",
        " other||1|0.250000|100|0.250000|0.250000|0.500000|1.000000",
        "  other|carol|1|0.250000|100|0.250000|0.250000|0.500000|1.000000",
    ]
    assert sshare("-P", "-l", "-n").splitlines() == lines[1:]
    table = sshare("--noheader").splitlines()
    assert table[0].split()[0] == "root" and "Account" not in sshare("-n")


def test_level_fs_is_shares_over_usage_among_siblings_members_and_sub_accounts_alike(tree):
    accounts.add_account(SETUP, "proj", parent=tree.lab, shares=2)  # a sibling of alice and bob, unused
    charge((tree.alice, 300.0), (tree.bob, 100.0), (tree.carol, 100.0))
    rows = by_name(rows_as_json())
    level = {key: row["level_fs"] for key, row in rows.items()}
    approx = pytest.approx
    assert level["lab", ""] == approx((3 / 4) / (400 / 500), rel=1e-4)  # 0.9375: a little over its share
    assert level["other", ""] == approx((1 / 4) / (100 / 500), rel=1e-4)  # 1.25
    assert level["lab", "alice"] == approx((1 / 4) / (300 / 400), rel=1e-4)  # 1 share of lab's 4; 3/4 of its use
    assert level["lab", "bob"] == approx((1 / 4) / (100 / 400), rel=1e-4)  # exactly his share: 1
    assert level["proj", ""] is None  # nothing used: infinite
    assert level["other", "carol"] == approx(1.0, rel=1e-4)
    assert rows["lab", "alice"]["norm_usage"] == approx(300 / 500, rel=1e-4)


@pytest.fixture
def nested(used, people):
    """lab holds proj (2 shares) with bob in it too."""
    proj = accounts.add_account(SETUP, "proj", parent=used.lab, shares=2)
    accounts.add_member(SETUP, proj, people["bob"])
    return used


def names(*args: str) -> list[tuple[str, str]]:
    return [(row.split("|")[0], row.split("|")[1]) for row in sshare("-P", "-n", *args).splitlines()]


def test_all_users_is_every_row(nested):
    assert names("-a") == names() == [
        ("root", ""), (" lab", ""), ("  lab", "alice"), ("  lab", "bob"), ("  proj", ""), ("   proj", "bob"),
        (" other", ""), ("  other", "carol"),
    ]


def test_users_narrow_to_their_rows_under_the_accounts_they_are_in(nested):
    assert names("-u", "bob") == [
        ("root", ""), (" lab", ""), ("  lab", "bob"), ("  proj", ""), ("   proj", "bob"),
    ]
    assert names("--users=alice,carol") == [
        ("root", ""), (" lab", ""), ("  lab", "alice"), (" other", ""), ("  other", "carol"),
    ]


def test_accounts_narrow_to_the_account_and_everything_under_it(nested):
    assert names("-A", "proj") == [("root", ""), ("  proj", ""), ("   proj", "bob")]
    assert names("--accounts=other,proj") == [
        ("root", ""), ("  proj", ""), ("   proj", "bob"), (" other", ""), ("  other", "carol"),
    ]
    assert names("-A", "lab", "-u", "bob") == [
        ("root", ""), (" lab", ""), ("  lab", "bob"), ("  proj", ""), ("   proj", "bob"),
    ]
    assert names("-A", "other", "-u", "bob") == [("root", "")]  # bob has no row in other


def test_json_is_narrowed_alike_and_keeps_the_report_rows(nested):
    rows = json.loads(sshare("--json", "-u", "carol"))
    assert [(r["account"], r["user"]) for r in rows] == [("other", ""), ("other", "carol")]
    assert rows[1]["level_fs"] == pytest.approx(1.0, rel=1e-4)


@pytest.mark.parametrize("args, message", [
    (("-A", "nope"), "No account named nope"),
    (("-u", "mallory"), "mallory: a member of no account"),
])
def test_unknown_names_are_refused_in_words(tree, args, message):
    with pytest.raises(CommandError, match=message):
        sshare(*args)


def test_parsable_and_json_do_not_mix(tree):
    with pytest.raises(CommandError, match="not allowed with"):
        sshare("-p", "--json")
