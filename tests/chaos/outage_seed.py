"""The rows of the database-outage test, written into its private PostgreSQL (the one DATABASE_URL
names) by a process of their own, since the test process's Django is connected to the suite's
database: alice, bob and dave interactive, carol on batch, a replica on the given engine, and a
signed-in session of alice's. Prints the keys' secrets and the session's key as JSON. `revoke NAME`
revokes NAME's key, through the audited action, as staff would.

    DATABASE_URL=postgres://... DJANGO_SETTINGS_MODULE=gpuportal.settings \\
        python -m tests.chaos.outage_seed http://127.0.0.1:PORT MODEL
    ... python -m tests.chaos.outage_seed revoke dave
"""

from __future__ import annotations

import json
import sys

import django


def seed(engine_url: str, model: str) -> dict[str, str]:
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.test import Client

    from fairness.actions.keys import issue_key
    from fairness.demo.default_tiers import ensure_default_tiers
    from fairness.models import Replica, Tier

    tiers = ensure_default_tiers(Tier)
    made: dict[str, str] = {}
    for username, tier in (("alice", "interactive"), ("bob", "interactive"), ("dave", "interactive"),
                           ("carol", "batch")):
        user = get_user_model().objects.create_user(username)
        made[username] = issue_key(user, tiers[tier], label=f"{username}'s key")[1]
    Replica.objects.create(name="sim-a", base_url=engine_url, model=model, max_num_seqs=8)
    client = Client()
    client.force_login(get_user_model().objects.get(username="alice"))  # the session row is written here
    made["session"] = client.cookies[settings.SESSION_COOKIE_NAME].value
    return made


def revoke(username: str) -> None:
    from fairness.actions import keys
    from fairness.actions.audit import command_line_actor
    from fairness.models import ApiKey

    keys.revoke(command_line_actor(), ApiKey.objects.get(owner__username=username))


if __name__ == "__main__":
    django.setup()
    if sys.argv[1] == "revoke":
        revoke(sys.argv[2])
    else:
        print(json.dumps(seed(sys.argv[1], sys.argv[2])))
