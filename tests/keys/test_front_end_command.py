"""`issue_key --front-end`: the JWT secret is read from a file and stored sealed; neither the row,
the audit log nor the command's output ever holds it."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import CommandError, call_command
from django.forms.models import model_to_dict

from fairness.actions.audit import command_line_actor
from fairness.actions.keys import rotate
from fairness.gateway.api_keys import hash_secret
from fairness.gateway.front_end_secrets import unseal
from fairness.models import ApiKey, AuditEntry

pytestmark = pytest.mark.django_db(transaction=True)

JWT_SECRET = "open-webui-forwarding-secret-0123456789abcdef"


def run(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out, stderr=out)
    return out.getvalue()


@pytest.fixture
def secret_file(tmp_path):
    path = tmp_path / "jwt-secret"
    path.write_text(JWT_SECRET + "\n")  # as `openssl rand -hex 32 > file` leaves it
    return path


def row_text(key: ApiKey) -> str:
    return json.dumps({**model_to_dict(key), "front_end_secret": key.front_end_secret}, default=str)


def test_a_front_end_key_stores_its_secret_sealed_and_shows_it_nowhere(cast, secret_file):
    out = run("issue_key", "--user", "alice", "--tier", "interactive", "--label", "open webui",
              "--front-end", "openwebui", "--jwt-secret-file", str(secret_file))

    key = ApiKey.objects.get(secret_hash=hash_secret(out.splitlines()[-1]))
    assert key.front_end == "openwebui"
    assert (key.front_end_trusts_plain_headers, key.front_end_adds_people) == (False, True)
    assert unseal(key.front_end_secret) == JWT_SECRET  # the file's newline dropped
    assert JWT_SECRET not in row_text(key)
    assert JWT_SECRET not in out and "Open WebUI" in out
    entry = AuditEntry.objects.get(action="key.issue", target=key.prefix)
    assert entry.detail["front_end"] == "openwebui"
    assert (entry.detail["jwt_secret_set"], entry.detail["trusts_plain_headers"], entry.detail["adds_people"]) == (
        True, False, True)
    assert JWT_SECRET not in json.dumps(entry.detail) and key.front_end_secret not in json.dumps(entry.detail)
    assert str(secret_file) in entry.detail["command"]  # the path, which is no secret


def test_plain_headers_alone_need_no_secret_and_people_can_be_left_out(cast):
    out = run("issue_key", "--user", "alice", "--tier", "interactive", "--front-end", "openwebui",
              "--trust-plain-headers", "--no-add-people")

    key = ApiKey.objects.get(secret_hash=hash_secret(out.splitlines()[-1]))
    assert (key.front_end, key.front_end_secret) == ("openwebui", "")
    assert (key.front_end_trusts_plain_headers, key.front_end_adds_people) == (True, False)
    detail = AuditEntry.objects.get(action="key.issue").detail
    assert (detail["jwt_secret_set"], detail["trusts_plain_headers"], detail["adds_people"]) == (False, True, False)


def test_an_ordinary_key_is_no_front_end_and_its_audit_entry_says_nothing_of_one(cast):
    out = run("issue_key", "--user", "alice", "--tier", "interactive")

    key = ApiKey.objects.get(secret_hash=hash_secret(out.splitlines()[-1]))
    assert (key.front_end, key.front_end_secret) == ("", "")
    assert "front_end" not in AuditEntry.objects.get(action="key.issue").detail


@pytest.mark.parametrize(("args", "message"), [
    (["--front-end", "openwebui"], "needs --jwt-secret-file"),
    (["--jwt-secret-file", "SECRET_FILE"], "need --front-end"),
    (["--trust-plain-headers"], "need --front-end"),
    (["--no-add-people"], "need --front-end"),
    (["--front-end", "openwebui", "--jwt-secret-file", "MISSING"], "No such file"),
])
def test_a_front_end_asked_for_wrongly_makes_nothing(cast, secret_file, args, message):
    args = [str(secret_file) if a == "SECRET_FILE" else str(secret_file.parent / "missing") if a == "MISSING" else a
            for a in args]
    before = ApiKey.objects.count()

    with pytest.raises(CommandError, match=message):
        run("issue_key", "--user", "alice", "--tier", "interactive", *args)

    assert ApiKey.objects.count() == before and not AuditEntry.objects.exists()


def test_an_unknown_front_end_is_refused(cast):
    with pytest.raises(CommandError, match="invalid choice"):
        run("issue_key", "--user", "alice", "--tier", "interactive", "--front-end", "librechat",
            "--trust-plain-headers")


def test_a_short_secret_is_refused_without_quoting_it(cast, tmp_path):
    short = tmp_path / "short"
    short.write_text("tooshort-but-secret\n")

    with pytest.raises(CommandError, match="at least 32 bytes") as refused:
        run("issue_key", "--user", "alice", "--tier", "interactive", "--front-end", "openwebui",
            "--jwt-secret-file", str(short))

    assert "tooshort-but-secret" not in str(refused.value)
    assert not AuditEntry.objects.exists()


def test_rotating_a_front_end_key_keeps_it_speaking_for_the_front_end(cast, secret_file):
    out = run("issue_key", "--user", "alice", "--tier", "interactive", "--front-end", "openwebui",
              "--jwt-secret-file", str(secret_file), "--no-add-people")
    old = ApiKey.objects.get(secret_hash=hash_secret(out.splitlines()[-1]))

    new, _ = rotate(command_line_actor(["manage.py"]), old)

    assert (new.front_end, new.front_end_adds_people) == ("openwebui", False)
    assert unseal(new.front_end_secret) == JWT_SECRET
