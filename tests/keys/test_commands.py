"""The key and replica commands change things through the audited actions: each entry names the
OS user and the command line, and no secret ever reaches the log."""

from __future__ import annotations

import getpass
import io

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command, load_command_class

from fairness.actions.audit import command_line_actor
from fairness.actions.keys import mint_secret
from fairness.actions.replicas import save_replica
from fairness.gateway.api_keys import hash_secret
from fairness.models import ApiKey, AuditEntry, Replica, Tier
from fairness.store.keyspace import CONFIG_EPOCH

pytestmark = pytest.mark.django_db(transaction=True)

OS_USER = f"os:{getpass.getuser()}"


def run(*args: str) -> list[str]:
    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue().splitlines()


def logged(entry: AuditEntry) -> str:
    return " ".join(str(value) for value in (entry.actor_name, entry.target, entry.detail))


def test_issue_key_is_audited_as_the_os_user_with_its_command_line(cast):
    *_, secret = run("issue_key", "--user", "alice", "--tier", "batch", "--label", "ci runner",
                     "--expires-days", "30")

    key = ApiKey.objects.get(secret_hash=hash_secret(secret))
    entry = AuditEntry.objects.get(action="key.issue")
    assert (entry.actor, entry.actor_name, entry.target) == (None, OS_USER, key.prefix)
    assert entry.detail["command"] == (
        "manage.py issue_key --user alice --tier batch --label 'ci runner' --expires-days 30"
    )
    assert secret not in logged(entry)


def test_issue_key_refuses_an_unknown_user_without_create_user(tiers):
    with pytest.raises(CommandError, match="No user named 'dora'.*--create-user"):
        run("issue_key", "--user", "dora", "--tier", "batch")

    assert not get_user_model().objects.filter(username="dora").exists()
    assert not ApiKey.objects.exists() and not AuditEntry.objects.exists()


def test_issue_key_creates_the_user_when_asked_and_audits_both(tiers):
    lines = run("issue_key", "--user", "dora", "--create-user", "--tier", "batch")

    assert "Created user dora." in lines
    secret = lines[-1]
    assert secret.startswith("gp-") and secret not in "\n".join(lines[:-1])
    key = ApiKey.objects.get(secret_hash=hash_secret(secret))
    assert key.owner.username == "dora"
    entries = AuditEntry.objects.order_by("pk")
    assert [(e.action, e.target, e.actor_name) for e in entries] == [
        ("user.create", "dora", OS_USER), ("key.issue", key.prefix, OS_USER),
    ]
    for entry in entries:
        assert entry.detail["command"] == "manage.py issue_key --user dora --create-user --tier batch"


def test_revoke_key_takes_the_whole_secret_and_never_repeats_it(cast):
    secret = cast["alice"].secret

    lines = run("revoke_key", secret)

    key = ApiKey.objects.get(pk=cast["alice"].key_id)
    assert key.revoked_at is not None
    assert secret not in "\n".join(lines) and key.prefix in lines[-1]
    entry = AuditEntry.objects.get(action="key.revoke")
    assert (entry.actor_name, entry.target) == (OS_USER, key.prefix)
    assert entry.detail["command"] == f"manage.py revoke_key '{key.prefix}…'"
    assert secret not in logged(entry)


def test_revoke_key_takes_the_prefix_as_the_pages_show_it(cast):
    key = ApiKey.objects.get(pk=cast["bob"].key_id)

    run("revoke_key", key.prefix + "…")
    lines = run("revoke_key", key.prefix)  # again: nothing left to change, nothing to audit

    key.refresh_from_db()
    assert key.revoked_at is not None
    assert "already revoked" in lines[-1]
    assert AuditEntry.objects.filter(action="key.revoke", target=key.prefix).count() == 1


def test_revoke_key_refuses_an_unknown_prefix_or_secret(cast):
    with pytest.raises(CommandError, match="No key with prefix 'gp-nothere'"):
        run("revoke_key", "gp-nothere")
    unknown = mint_secret()
    with pytest.raises(CommandError, match="No key with that secret") as refused:
        run("revoke_key", unknown)

    assert unknown not in str(refused.value)
    assert not ApiKey.objects.exclude(revoked_at=None).exists()
    assert not AuditEntry.objects.exists()


def test_a_command_run_from_the_shell_records_the_line_as_typed_but_masked(cast, capsys):
    secret = cast["carol"].secret

    load_command_class("fairness", "revoke_key").run_from_argv(["manage.py", "revoke_key", secret])

    entry = AuditEntry.objects.get(action="key.revoke")
    assert entry.detail["command"] == f"manage.py revoke_key '{secret[:11]}…'"
    assert secret not in logged(entry) and secret not in capsys.readouterr().out


def test_add_replica_saves_its_tiers_and_never_logs_the_engine_key(tiers):
    run("add_replica", "--name", "gpu0", "--url", "http://127.0.0.1:9", "--model", "tiny",
        "--max-num-seqs", "8", "--api-key", "engine-key-1234", "--tiers", "interactive, batch")

    replica = Replica.objects.get(name="gpu0")
    assert {t.name for t in replica.tiers.all()} == {"interactive", "batch"}
    entry = AuditEntry.objects.get(action="replica.create")
    assert (entry.actor_name, entry.target, entry.detail["tiers"]) == (OS_USER, "gpu0", ["batch", "interactive"])
    assert "api_key" not in entry.detail and "engine-key-1234" not in logged(entry)
    assert "--api-key '[masked]'" in entry.detail["command"]


def test_add_replica_keeps_the_tiers_unless_told_and_empty_means_every_tier(tiers):
    base = ("add_replica", "--name", "gpu0", "--url", "http://127.0.0.1:9", "--model", "tiny")
    run(*base, "--max-num-seqs", "8", "--tiers", "batch")

    run(*base, "--max-num-seqs", "16")
    replica = Replica.objects.get(name="gpu0")
    assert (replica.max_num_seqs, [t.name for t in replica.tiers.all()]) == (16, ["batch"])
    update = AuditEntry.objects.filter(action="replica.update").latest("pk")
    assert update.detail["max_num_seqs"] == 16 and "tiers" not in update.detail and "model" not in update.detail

    lines = run(*base, "--max-num-seqs", "16", "--tiers", "")
    assert not replica.tiers.exists() and lines[-1].endswith("to every tier.")


def test_add_replica_with_conflicting_or_unknown_tiers_leaves_no_row(tiers):
    run("add_replica", "--name", "r1", "--url", "http://127.0.0.1:9", "--model", "tiny", "--max-num-seqs", "8")

    # Batch-only r2 beside r1, which serves every tier: batch would count r1's slots twice.
    with pytest.raises(CommandError, match="tiers: .*count r1's slots as its own"):
        run("add_replica", "--name", "r2", "--url", "http://127.0.0.1:8", "--model", "tiny",
            "--max-num-seqs", "8", "--tiers", "batch")
    with pytest.raises(CommandError, match="no tier named gold"):
        run("add_replica", "--name", "r3", "--url", "http://127.0.0.1:7", "--model", "tiny",
            "--max-num-seqs", "8", "--tiers", "batch,gold")

    assert list(Replica.objects.values_list("name", flat=True)) == ["r1"]
    assert list(AuditEntry.objects.values_list("target", flat=True)) == ["r1"]


def test_a_replica_whose_tiers_fail_to_save_is_not_saved_either(tiers, redis_client):
    redis_client.set(CONFIG_EPOCH, "before")
    unsaved = Tier(name="ghost")

    with pytest.raises(ValueError):
        save_replica(command_line_actor(["manage.py", "add_replica"]),
                             Replica(name="gpu0", base_url="http://127.0.0.1:9", model="tiny"), {}, [unsaved])

    assert not Replica.objects.exists() and not AuditEntry.objects.exists()
    assert redis_client.get(CONFIG_EPOCH) == b"before"  # gateways were told of nothing

    save_replica(command_line_actor(["manage.py", "add_replica"]),
                         Replica(name="gpu0", base_url="http://127.0.0.1:9", model="tiny"), {}, [tiers["batch"]])
    assert redis_client.get(CONFIG_EPOCH) != b"before"
