"""The audit log every action writes: who acted (Actor) from where, what, on what, with secrets masked.
A leaf: every other action module builds on it."""

from __future__ import annotations

import getpass
import os
import re
import shlex
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fairness.models import AuditEntry

if TYPE_CHECKING:
    from django.contrib.auth.models import User


@dataclass(frozen=True)
class Actor:
    """Who acts, and from where (for the audit log).

    A management command has no signed-in user: `name` then says who ran it and `command` what
    was run (see command_line_actor)."""

    user: User | None
    ip: str | None = None
    name: str = ""
    command: str = ""


def audit(actor: Actor, action: str, target: str, **detail: Any) -> AuditEntry:
    if actor.command:
        detail["command"] = actor.command
    return AuditEntry.objects.create(
        actor=actor.user, actor_name=actor.user.get_username() if actor.user else actor.name, action=action,
        target=target, detail=detail, ip=actor.ip,
    )


MASKED = "[masked]"


# --api-key X, --password=X, --token X: the value is a secret whatever it looks like.
_SECRET_OPTION = re.compile(r"^--?[\w-]*(key|secret|token|password)$", re.IGNORECASE)


_TOKEN_LIKE = re.compile(r"^[A-Za-z0-9_\-+/=.]{20,}$")


def command_line_actor(argv: list[str] | None = None) -> Actor:
    """The actor of a management command: the OS user who ran it and its command line (this
    process's own when not given), with every secret in it masked (even a revoked one has no
    place in the audit log)."""
    command = shlex.join(_masked(sys.argv if argv is None else argv))
    return Actor(None, name=f"os:{_os_user()}", command=command)


def _os_user() -> str:
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # a container's uid with no name in /etc/passwd
        return f"uid-{os.getuid()}"


def _masked(argv: list[str]) -> list[str]:
    masked: list[str] = []
    secret_next = False
    for arg in argv:
        option, equals, value = arg.partition("=") if arg.startswith("-") else ("", "", arg)
        if secret_next:
            masked.append(_prefix_or_masked(arg))
            secret_next = False
        elif option and _SECRET_OPTION.match(option):
            masked.append(f"{option}={_prefix_or_masked(value)}" if equals else option)
            secret_next = not equals
        elif option and equals:
            masked.append(f"{option}={_masked_value(value)}")
        else:
            masked.append(_masked_value(arg))
    return masked


def _visible_prefix(value: str) -> str | None:
    """A key's or token's prefix (shown on every page anyway: `--key gp-AbCdEfGh` names a key, it
    gives nothing away), a whole secret cut to it; None for anything else."""
    for start, visible in (("gpa-", 12), ("gp-", 11)):
        if value.startswith(start):
            return value if len(value) <= visible else value[:visible] + "…"
    return None


def _prefix_or_masked(value: str) -> str:
    """The value of an option named like a secret: a key's prefix stays, anything else is hidden."""
    return _visible_prefix(value) or MASKED


def _masked_value(value: str) -> str:
    """A key or token secret keeps its visible prefix; anything else shaped like a random
    credential is hidden whole."""
    prefix = _visible_prefix(value)
    if prefix is not None:
        return prefix
    looks_random = all(any(test(c) for c in value) for test in (str.isupper, str.islower, str.isdigit))
    return MASKED if _TOKEN_LIKE.match(value) and looks_random else value


def jsonable(values: dict[str, Any]) -> dict[str, Any]:
    def plain(value: object) -> bool:
        if isinstance(value, list):  # a list of names (allowed models) stays a list
            return all(isinstance(item, str) for item in value)
        return isinstance(value, (str, int, float, bool, type(None)))

    return {k: (v if plain(v) else str(v)) for k, v in values.items()}
