"""The demo's own secret key: made once in var/, reused on every start.

The settings refuse to start without SECRET_KEY unless DEBUG is on, and the demo runs with DEBUG
off like production. A key kept in a file keeps sign-ins valid across restarts of the demo.
Runs before Django's settings load (manage.py), so it imports nothing of Django's.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

COMMANDS = ("demo", "demo_traffic")


def ensure_demo_secret_key(argv: list[str], var_dir: Path) -> None:
    """With no key configured, point SECRET_KEY_FILE at the demo's key: the demo's commands
    create it (readable by its owner only) the first time, and once it exists the other commands
    (issue_key and the rest, run against the demo's database) use it too. The demo's children
    inherit it."""
    if os.environ.get("SECRET_KEY") or os.environ.get("SECRET_KEY_FILE"):
        return
    path = var_dir / "demo_secret_key"
    demo = len(argv) >= 2 and argv[1] in COMMANDS
    if not demo and not path.exists():
        return
    if not path.exists():
        var_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as file:
            file.write(secrets.token_urlsafe(50) + "\n")
    os.environ["SECRET_KEY_FILE"] = str(path)
