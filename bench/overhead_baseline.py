"""A gateway from an earlier checkout, measured beside ours in the same run: what a change costs.

    git worktree add /tmp/before <commit>
    .venv/bin/python -m bench.overhead --baseline /tmp/before

The earlier tree runs under this virtualenv with a SQLite database of its own (migrated by its
own code) and a Redis database of its own on the same server, against the same engines. Its keys
sit in a tier with the same fields as the bench tier, so the two gateways differ only in code.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.harness import LOGS
from enginesim.process import pick_free_port

# Run by the earlier tree's `manage.py shell`: its tier, users, keys and replicas. Only names
# that have stayed put since the fair-share work began are used.
_SETUP = """
import json
from django.contrib.auth import get_user_model
from fairness.models import Replica, Tier
from fairness.gateway.api_keys import VISIBLE_CHARS, hash_secret
from fairness.models import ApiKey
from fairness.actions.keys import issue_key

spec = json.loads({spec!r})
tier = Tier.objects.create(name="bench", **spec["tier"])
for name, url, slots in spec["replicas"]:
    Replica.objects.create(name=name + "-0", base_url=url, model=name, max_num_seqs=slots)
for username, secret in zip(spec["users"], spec["secrets"]):
    user = get_user_model().objects.create(username=username)
    key = issue_key(user, tier, label="bench " + username)[0]
    # Ours' secret: one client can then send the same request to either gateway.
    ApiKey.objects.filter(pk=key.pk).update(prefix=secret[:VISIBLE_CHARS], secret_hash=hash_secret(secret))
"""


def _run(tree: Path, env: Mapping[str, str], *args: str) -> str:
    done = subprocess.run([sys.executable, "manage.py", *args], cwd=tree, env=dict(env),
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{tree}: manage.py {args[0]} failed:\n{done.stdout}{done.stderr}")
    return done.stdout


@contextlib.contextmanager
def baseline_gateway(tree: Path, *, workdir: str, redis_url: str, tier: Mapping[str, Any],
                     replicas: Sequence[tuple[str, str, int]], keys: Mapping[str, str]) -> Iterator[Any]:
    """The earlier tree's gateway (a tests.support.gateway_process.GatewayProcess), its ``keys``
    (username -> secret) the same secrets as ours. ``replicas``: (model, engine URL, slots) for
    each engine it should serve."""
    from tests.support.gateway_process import GatewayProcess

    if not (tree / "manage.py").exists():
        raise SystemExit(f"--baseline {tree}: not a checkout of this project (no manage.py)")
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{workdir}/baseline.sqlite3",
        "REDIS_URL": redis_url,
        "CELERY_BROKER_URL": redis_url,
        "DJANGO_SETTINGS_MODULE": "gpuportal.settings",
        "LOG_LEVEL": "WARNING",
    }
    _run(tree, env, "migrate", "--noinput", "-v", "0")
    spec = json.dumps({"tier": dict(tier), "replicas": [list(r) for r in replicas], "users": list(keys),
                       "secrets": list(keys.values())})
    _run(tree, env, "shell", "-c", _SETUP.format(spec=spec))
    LOGS.mkdir(parents=True, exist_ok=True)
    port = pick_free_port()
    gateway = GatewayProcess(port, env, LOGS / f"baseline-{port}.log", root=tree)
    try:
        yield gateway
    finally:
        gateway.stop()
