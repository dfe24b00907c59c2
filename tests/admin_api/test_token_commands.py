"""Admin tokens from the command line: a script gets one with no browser, and loses it on revocation."""

from __future__ import annotations

import datetime as dt
import getpass
import io
import os
import subprocess
import sys

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from django.utils import timezone

from fairness.actions.audit import Actor, command_line_actor
from fairness.actions.tokens import issue_admin_token
from fairness.models import AdminToken, AuditEntry
from tests.support.gateway_process import ROOT
from tests.support.processes import gateway_env

pytestmark = pytest.mark.django_db(transaction=True)


def admin_get(secret: str, path: str = "/api/admin/keys"):
    return Client().get(path, HTTP_AUTHORIZATION=f"Bearer {secret}")


def issue(*args: str) -> tuple[str, list[str]]:
    out = io.StringIO()
    call_command("issue_admin_token", *args, stdout=out)
    lines = out.getvalue().splitlines()
    return lines[-1], lines


def test_the_command_prints_the_secret_alone_last_and_a_script_can_use_it(staff, cast, live_db_url):
    # The real command in its own process, as an operator or a deploy script runs it.
    run = subprocess.run(
        [sys.executable, "manage.py", "issue_admin_token", "--user", "sam", "--label", "nightly sync",
         "--expires-days", "30"],
        cwd=ROOT, env={**os.environ, **gateway_env(live_db_url)}, capture_output=True, text=True, timeout=120,
    )
    assert run.returncode == 0, run.stderr
    *explanation, secret = run.stdout.splitlines()
    assert secret.startswith("gpa-") and secret == secret.strip() and len(secret) > 40
    assert explanation and secret not in "\n".join(explanation) and secret not in run.stderr

    response = admin_get(secret)
    assert response.status_code == 200, response.content
    assert {row["owner"] for row in response.json()} == {"alice", "bob", "carol"}

    token = AdminToken.objects.get()
    assert (token.owner, token.label, token.prefix) == (staff, "nightly sync", secret[:12])
    assert 29 <= (token.expires_at - timezone.now()).days <= 30
    entry = AuditEntry.objects.get(action="admin_token.issue")
    assert (entry.actor, entry.actor_name, entry.target) == (None, f"os:{getpass.getuser()}", token.prefix)
    assert "issue_admin_token --user sam --label 'nightly sync' --expires-days 30" in entry.detail["command"]


def test_revoking_by_the_prefix_makes_the_token_401(staff, cast):
    secret, _ = issue("--user", "sam")
    assert admin_get(secret).status_code == 200

    out = io.StringIO()
    call_command("revoke_admin_token", secret[:12], stdout=out)

    assert f"Revoked admin token {secret[:12]}… of sam" in out.getvalue()
    assert admin_get(secret).status_code == 401
    assert admin_get(secret, "/api/admin/users").status_code == 401


def test_revoking_by_the_whole_secret_works_and_keeps_the_secret_out_of_the_audit_log(staff, cast, monkeypatch):
    secret, _ = issue("--user", "sam", "--label", "ci")
    monkeypatch.setattr(sys, "argv", ["manage.py", "revoke_admin_token", secret])

    out = io.StringIO()
    call_command("revoke_admin_token", secret, stdout=out)

    assert secret not in out.getvalue()
    assert admin_get(secret).status_code == 401
    entry = AuditEntry.objects.get(action="admin_token.revoke")
    assert entry.target == secret[:12] and entry.actor is None
    assert entry.detail["command"] == f"manage.py revoke_admin_token '{secret[:12]}…'"
    assert all(secret not in str(e.detail) for e in AuditEntry.objects.all())


def test_revoking_twice_revokes_once_and_an_unknown_token_is_an_error(staff, cast):
    secret, _ = issue("--user", "sam")
    call_command("revoke_admin_token", secret[:12] + "…", stdout=io.StringIO())  # as the pages show it
    again = io.StringIO()
    call_command("revoke_admin_token", secret[:12], stdout=again)
    assert "already revoked" in again.getvalue()
    assert AuditEntry.objects.filter(action="admin_token.revoke").count() == 1

    guessed = "gpa-" + "x" * 43
    with pytest.raises(CommandError) as refused:
        call_command("revoke_admin_token", guessed, stdout=io.StringIO())
    assert guessed not in str(refused.value)


def test_the_command_refuses_unknown_users_and_non_staff(staff, cast):
    with pytest.raises(CommandError, match="No user named 'nobody'"):
        issue("--user", "nobody")
    with pytest.raises(CommandError, match="alice is not active staff"):
        issue("--user", "alice")
    with pytest.raises(CommandError, match="--expires-days"):
        issue("--user", "sam", "--expires-days", "0")
    assert not AdminToken.objects.exists()
    assert not AuditEntry.objects.exists()


def test_an_expired_token_is_401(staff, cast):
    token, secret = issue_admin_token(Actor(staff), staff, "short", timezone.now() + dt.timedelta(hours=1))
    assert admin_get(secret).status_code == 200

    AdminToken.objects.filter(pk=token.pk).update(expires_at=timezone.now() - dt.timedelta(seconds=1))

    assert admin_get(secret).status_code == 401


def test_a_token_stops_when_its_owner_stops_being_active_staff(staff, cast):
    secret = issue_admin_token(Actor(staff), staff)[1]
    staff.is_staff = False
    staff.save(update_fields=["is_staff"])
    assert admin_get(secret).status_code == 401

    staff.is_staff, staff.is_active = True, False
    staff.save(update_fields=["is_staff", "is_active"])
    assert admin_get(secret).status_code == 401


def test_the_command_line_actor_masks_every_secret_in_the_command():
    secret = "gpa-AbCdEfGh" + "Xy0_" * 9
    actor = command_line_actor([
        "manage.py", "add_replica", "--api-key", "hunter2", "--password=swordfish", "--label=nightly_user_sync_job",
        "--max-tokens", "100", "sk-Q2VfRt9LmN0pZx7YwK3aB", secret, "gp-AbCdEfGh",
        "--key", "gp-ZyXwVuTs", "--api-key=gp-QqRrSsTtUuVvWwXxYyZz0123456789",
    ])
    assert actor.user is None and actor.name == f"os:{getpass.getuser()}"
    for hidden in ("hunter2", "swordfish", "sk-Q2VfRt9LmN0pZx7YwK3aB", secret, "UuVvWwXxYyZz0123456789"):
        assert hidden not in actor.command
    for kept in ("--label=nightly_user_sync_job", "--max-tokens 100", "gpa-AbCdEfGh…", "gp-AbCdEfGh",
                 "--key gp-ZyXwVuTs", "--api-key=gp-QqRrSsTt…"):  # a key's prefix names it: not secret
        assert kept in actor.command
