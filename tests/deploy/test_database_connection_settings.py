"""How the processes connect to PostgreSQL: never waiting past GP_DATABASE_CONNECT_TIMEOUT for a
database host that does not answer, and checking a kept connection before using it again, so a
database that went away and came back needs no restart (docs/operations.md)."""

from __future__ import annotations

import ast
import socket
import time

import pytest
from django.db.utils import ConnectionHandler, OperationalError

from tests.support.settings_process import load_settings

POSTGRES = "postgres://portal@127.0.0.1:5999/portal"


def database_settings(**env: str) -> dict:
    child = load_settings('settings.DATABASES["default"]', SECRET_KEY="k", **env)
    assert child.returncode == 0, child.stderr
    return ast.literal_eval(child.stdout.strip())


def test_postgresql_connections_time_out_and_are_checked_before_reuse():
    default = database_settings(DATABASE_URL=POSTGRES, DB_CONN_MAX_AGE="60")
    assert default["OPTIONS"]["connect_timeout"] == 3
    assert (default["CONN_MAX_AGE"], default["CONN_HEALTH_CHECKS"]) == (60, True)
    assert database_settings(DATABASE_URL=POSTGRES, GP_DATABASE_CONNECT_TIMEOUT="7")["OPTIONS"]["connect_timeout"] == 7
    assert "connect_timeout" not in database_settings().get("OPTIONS", {})  # SQLite's driver takes no such option


@pytest.mark.parametrize("value", ["0", "soon"])
def test_a_connect_timeout_that_is_none_stops_start_up_naming_it(value):
    child = load_settings("settings.DATABASES", SECRET_KEY="k", DATABASE_URL=POSTGRES,
                          GP_DATABASE_CONNECT_TIMEOUT=value)
    assert child.returncode != 0 and "GP_DATABASE_CONNECT_TIMEOUT" in child.stderr


def test_a_database_host_that_never_answers_fails_the_connection_within_the_timeout(django_db_blocker):
    # A listener that completes the TCP handshake (the kernel's backlog) and never says a word,
    # as a host behind a black-holing firewall or a hung server would.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        configured = database_settings(DATABASE_URL=f"postgres://portal@127.0.0.1:{port}/portal",
                                       GP_DATABASE_CONNECT_TIMEOUT="2")
        handler = ConnectionHandler({"default": configured})
        started = time.monotonic()
        with django_db_blocker.unblock(), pytest.raises(OperationalError):  # a database of its own, not the suite's
            handler["default"].ensure_connection()
        waited = time.monotonic() - started
        handler["default"].close()
    assert 1.5 < waited < 5, f"the connection attempt took {waited:.1f} s"
