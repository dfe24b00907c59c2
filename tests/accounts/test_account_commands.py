"""add_account and add_member: the tree built from the command line, every change audited with
the command that made it, and a clear refusal for each mistake."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from fairness.models import Account, AuditEntry, Membership

pytestmark = pytest.mark.django_db(transaction=True)


def run(*args, **options) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out, **options)
    return out.getvalue()


def test_it_builds_a_tree_of_accounts(people):
    assert "Added account lab at the top with 3 shares." in run("add_account", "lab", shares=3,
                                                                 description="The lab")
    assert "under lab with 1 share" in run("add_account", "proj", parent="lab")
    lab, proj = Account.objects.get(name="lab"), Account.objects.get(name="proj")
    assert (lab.parent, lab.shares, lab.description) == (None, 3, "The lab")
    assert (proj.parent, proj.shares) == (lab, 1)


def test_each_change_is_audited_with_its_command_line(people):
    run("add_account", "lab", shares=3)
    run("add_member", "lab", "alice", shares=2)
    run("add_account", "lab", shares=5, update=True)
    added, member, changed = AuditEntry.objects.order_by("pk")
    assert (added.action, added.target) == ("account.add", "lab")
    assert added.detail["command"] == "manage.py add_account lab --shares 3"
    assert added.actor is None and added.actor_name.startswith("os:")
    assert (member.action, member.detail["user"], member.detail["shares"]) == ("account.add_member", "alice", 2)
    assert member.detail["command"] == "manage.py add_member lab alice --shares 2"
    assert changed.action == "account.change" and changed.detail["shares"] == [3, 5]
    assert changed.detail["command"] == "manage.py add_account lab --shares 5 --update"


def test_members_join_and_their_first_account_is_their_default(people):
    run("add_account", "lab")
    run("add_account", "other")
    assert "alice is in lab with 1 share; it is their default account." in run("add_member", "lab", "alice")
    assert run("add_member", "other", "alice", shares=2) == "alice is in other with 2 shares.\n"
    memberships = {m.account.name: (m.shares, m.is_default) for m in Membership.objects.filter(user=people["alice"])}
    assert memberships == {"lab": (1, True), "other": (2, False)}


def test_default_moves_to_the_account_named_and_keeps_the_shares(people):
    run("add_account", "lab")
    run("add_account", "other")
    run("add_member", "lab", "alice")
    run("add_member", "other", "alice", shares=4)
    run("add_member", "other", "alice", default=True)
    memberships = {m.account.name: (m.shares, m.is_default) for m in Membership.objects.filter(user=people["alice"])}
    assert memberships == {"lab": (1, False), "other": (4, True)}


def test_an_account_moves_to_another_parent_and_back_to_the_top(people):
    run("add_account", "lab")
    run("add_account", "proj")
    run("add_account", "proj", parent="lab", update=True)
    assert Account.objects.get(name="proj").parent == Account.objects.get(name="lab")
    run("add_account", "proj", top=True, update=True)
    assert Account.objects.get(name="proj").parent is None
    assert [e.detail["parent"] for e in AuditEntry.objects.filter(action="account.change").order_by("pk")] == [
        [None, "lab"], ["lab", None],
    ]


@pytest.mark.parametrize(
    ("args", "options", "message"),
    [
        (("add_account", "proj"), {"parent": "nowhere"}, "--parent: no account named 'nowhere'"),
        (("add_account", "lab"), {}, "An account named 'lab' exists already. Add --update"),
        (("add_account", "x"), {"shares": 0}, "--shares must be a whole number from 1 to 1,000,000"),
        (("add_account", "x"), {"shares": 10**7}, "--shares must be a whole number from 1 to 1,000,000"),
        (("add_account", "has space"), {}, "name: Letters, digits and . @ + - _ only"),
        (("add_account", "nothing"), {"shares": 2, "update": True}, "No account named 'nothing'"),
        (("add_account", "lab"), {"update": True}, "Nothing to change"),
        (("add_account", "lab"), {"update": True, "parent": "lab"}, "parent: An account cannot sit under itself."),
        (("add_account", "x"), {"top": True, "parent": "lab"}, "--top and --parent"),
        (("add_member", "nowhere", "alice"), {}, "No account named 'nowhere'"),
        (("add_member", "lab", "mallory"), {}, "No user named 'mallory'"),
        (("add_member", "lab", "alice"), {"shares": -1}, "--shares must be a whole number from 1"),
    ],
)
def test_mistakes_are_refused_clearly_and_change_nothing(people, args, options, message):
    run("add_account", "lab")
    before = AuditEntry.objects.count(), Account.objects.count(), Membership.objects.count()
    with pytest.raises(CommandError) as refused:
        run(*args, **options)
    assert message in str(refused.value)
    assert (AuditEntry.objects.count(), Account.objects.count(), Membership.objects.count()) == before


def test_a_parent_cycle_is_refused(people):
    run("add_account", "lab")
    run("add_account", "proj", parent="lab")
    run("add_account", "task", parent="proj")
    with pytest.raises(CommandError, match="parent: An account cannot sit under itself"):
        run("add_account", "lab", parent="task", update=True)
    assert Account.objects.get(name="lab").parent is None
    assert not AuditEntry.objects.filter(action="account.change").exists()
