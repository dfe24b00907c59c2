"""manage.py usage_report: sreport's AccountUtilizationByUser layout (period and unit in a
header, accounts summing their subtrees with their users under them), CSV and JSON of the same."""

from __future__ import annotations

import csv
import io
import json

import pytest
from django.core.management import CommandError, call_command

from tests.support.usage_records import record

PERIOD = ("--from", "2031-03-10", "--to", "2031-03-11")


def usage_report(*args: str) -> str:
    out = io.StringIO()
    call_command("usage_report", *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def usage(tree):
    record(tree.alice, prompt=100, completion=10, queued_ms=40)
    record(tree.bob, prompt=10, completion=5, queued_ms=900, status=502)
    record(tree.carol, prompt=1, completion=1)
    return tree


def test_it_prints_the_period_and_unit_then_accounts_with_their_users(usage):
    lines = usage_report(*PERIOD, "--by", "account,user").splitlines()
    assert lines[0] == lines[3] == "-" * 100
    assert lines[1] == "Account/User Utilization 2031-03-10 - 2031-03-11 (1 day, UTC, the end day not included)"
    assert lines[2] == ("Usage reported in weighted tokens (1 x prompt + 0.1 x cached prompt + 2 x completion tokens), "
                        "undecayed")
    assert lines[4].split()[:5] == ["Account", "Login", "Used", "Requests", "Errors"]
    body = [line.split()[:4] for line in lines[6:-2]]
    assert body == [
        ["lab", "140", "2", "1"],  # alice's 120 and proj's 20: an account sums its subtree
        ["lab", "alice", "120", "1"],
        ["proj", "20", "1", "1"],
        ["proj", "bob", "20", "1"],
        ["other", "3", "1", "0"],
        ["other", "carol", "3", "1"],
    ]
    indents = [len(line) - len(line.lstrip()) for line in lines[6:-2]]
    assert indents == [0, 1, 1, 2, 0, 1]  # proj sits under lab, users one step in (as sshare)
    assert lines[-1].split()[:4] == ["Total", "143", "3", "1"]


def test_by_account_alone_lists_only_the_accounts(usage):
    lines = usage_report(*PERIOD, "--by", "account").splitlines()
    assert lines[4].split()[:2] == ["Account", "Used"]
    assert [line.split()[:2] for line in lines[6:-2]] == [["lab", "140"], ["proj", "20"], ["other", "3"]]


def test_other_groupings_list_one_row_per_group(usage):
    lines = usage_report(*PERIOD, "--by", "tier,model").splitlines()
    assert lines[1].startswith("Utilization by Tier/Model 2031-03-10 - 2031-03-11")
    assert [line.split()[:3] for line in lines[6:-2]] == [["interactive", "sim", "143"]]


def test_csv_and_json_give_the_same_rows(usage):
    rows = list(csv.DictReader(io.StringIO(usage_report(*PERIOD, "--format", "csv"))))
    assert [(r["account"], r["user"], r["weighted_tokens"], r["depth"]) for r in rows] == [
        ("lab", "", "140.0", "0"), ("lab", "alice", "120.0", "1"), ("proj", "", "20.0", "1"),
        ("proj", "bob", "20.0", "2"), ("other", "", "3.0", "0"), ("other", "carol", "3.0", "1"),
    ]
    body = json.loads(usage_report(*PERIOD, "--format", "json"))
    assert body["tree"] is True
    assert [(r["account"], r["user"], r["weighted_tokens"]) for r in body["rows"]] == [
        (r["account"], r["user"], float(r["weighted_tokens"])) for r in rows]
    assert body["total"]["weighted_tokens"] == 143
    flat = json.loads(usage_report(*PERIOD, "--by", "user", "--format", "json"))
    assert flat["tree"] is False
    assert sum(r["weighted_tokens"] for r in flat["rows"]) == flat["total"]["weighted_tokens"] == 143


def test_an_empty_period_says_so(tree):
    assert "(no requests in this period)" in usage_report(*PERIOD)


@pytest.mark.parametrize("args, message", [
    (("--from", "2031-3-1x", "--to", "2031-03-11"), "not a date"),
    (("--from", "2031-03-11", "--to", "2031-03-10"), "end date must come after"),
    (("--by", "project"), "Unknown grouping project"),
])
def test_bad_arguments_are_refused_in_words(tree, args, message):
    with pytest.raises(CommandError, match=message):
        usage_report(*args)


def used_column(lines: list[str]) -> list[tuple[str, str]]:
    """(first word, Used) of each body line of a table whose Used follows one name column."""
    return [(line.split()[0], line.split()[1]) for line in lines[6:-2]]


def test_time_format_percent_shows_each_row_as_a_part_of_the_total(usage):
    lines = usage_report(*PERIOD, "-t", "percent").splitlines()
    assert lines[2].startswith("Usage reported in percent of the total weighted tokens (1 x prompt")
    assert [line.split()[:3] for line in lines[6:-2]] == [  # 140, 120, 20, 20, 3 and 3 of 143
        ["lab", "97.90%", "2"], ["lab", "alice", "83.92%"], ["proj", "13.99%", "1"], ["proj", "bob", "13.99%"],
        ["other", "2.10%", "1"], ["other", "carol", "2.10%"],
    ]
    assert lines[-1].split()[:2] == ["Total", "100.00%"]
    tops = [line for line in lines[6:-2] if not line.startswith(" ") and line.split()[1].endswith("%")]
    assert len(tops) == 2  # lab and other: the top accounts hold everything
    assert sum(float(line.split()[1].rstrip("%")) for line in tops) == pytest.approx(100, abs=0.01)


def test_time_format_percent_over_a_flat_grouping_sums_to_a_hundred(usage):
    lines = usage_report(*PERIOD, "--by", "user", "-t", "Percent").splitlines()
    shares = used_column(lines)
    assert [name for name, _ in shares] == ["alice", "bob", "carol"]  # largest first, as in raw figures
    assert sum(float(used.rstrip("%")) for _, used in shares) == pytest.approx(100, abs=0.01)
    body = json.loads(usage_report(*PERIOD, "--by", "user", "-t", "percent", "--format", "json"))
    assert [r["weighted_tokens"] for r in body["rows"]] == [120, 20, 3]  # the raw figures stay
    assert sum(r["weighted_tokens_percent"] for r in body["rows"]) == pytest.approx(100)
    assert body["total"]["weighted_tokens_percent"] == 100


def test_time_format_raw_is_the_default(usage):
    assert usage_report(*PERIOD, "-t", "raw") == usage_report(*PERIOD)
    assert "%" not in usage_report(*PERIOD)


def test_time_format_percent_refuses_csv_in_words(usage):
    with pytest.raises(CommandError, match="CSV keeps the raw figures"):
        usage_report(*PERIOD, "-t", "percent", "--format", "csv")
    with pytest.raises(CommandError, match="invalid choice"):
        usage_report(*PERIOD, "-t", "hours")
