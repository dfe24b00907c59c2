"""What makes a key a front end's (Open WebUI speaking for many people), checked in one place for
the command, the staff pages and the admin API."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from django.core.exceptions import ValidationError

from fairness.gateway.front_end_secrets import check_secret, seal

if TYPE_CHECKING:
    from fairness.models import ApiKey

KINDS = {"openwebui": "Open WebUI"}


@dataclass(frozen=True)
class FrontEnd:
    """A key's front-end settings as stored: the secret sealed, never in the clear."""

    kind: str = ""  # "": the key speaks for its owner only
    sealed_secret: str = ""
    trusts_plain_headers: bool = False
    adds_people: bool = True

    @classmethod
    def of(cls, key: ApiKey) -> FrontEnd:
        return cls(key.front_end, key.front_end_secret, key.front_end_trusts_plain_headers,
                   key.front_end_adds_people)

    def fields(self) -> dict[str, object]:
        return {"front_end": self.kind, "front_end_secret": self.sealed_secret,
                "front_end_trusts_plain_headers": self.trusts_plain_headers,
                "front_end_adds_people": self.adds_people}

    def audit_detail(self) -> dict[str, object]:
        """What the audit log says of it: the modes and whether a secret is set, never the secret."""
        if not self.kind:
            return {"front_end": ""}
        return {"front_end": self.kind, "jwt_secret_set": bool(self.sealed_secret),
                "trusts_plain_headers": self.trusts_plain_headers, "adds_people": self.adds_people}


NONE = FrontEnd()


def requested(kind: str, secret: str | None = None, trusts_plain_headers: bool = False,
              adds_people: bool = True) -> FrontEnd:
    """A new key's front end as asked for; raises ValidationError naming the field at fault."""
    return changed(NONE, kind, secret, trusts_plain_headers, adds_people)


def changed(current: FrontEnd, kind: str | None = None, secret: str | None = None,
            trusts_plain_headers: bool | None = None, adds_people: bool | None = None) -> FrontEnd:
    """`current` with what is given changed (None keeps it); a new secret replaces the old one.
    Raises ValidationError naming the field at fault. Turning the front end off forgets its
    secret and modes: a key that is no front end has no use for them."""
    kind = current.kind if kind is None else kind
    if kind and kind not in KINDS:
        raise ValidationError({"front_end": f"Unknown front end {kind!r}; known: {', '.join(KINDS)}."})
    if not kind:
        if secret or trusts_plain_headers or adds_people is False:
            raise ValidationError({"front_end": "A JWT secret, trusting plain headers and not adding people "
                                                "apply to a front end's key only: choose the front end too."})
        return NONE
    sealed = current.sealed_secret if current.kind else ""
    if secret:
        try:
            sealed = seal(check_secret(secret))
        except ValidationError as exc:
            raise ValidationError({"jwt_secret": exc.messages}) from None
    result = replace(
        current, kind=kind, sealed_secret=sealed,
        trusts_plain_headers=current.trusts_plain_headers if trusts_plain_headers is None else trusts_plain_headers,
        adds_people=current.adds_people if adds_people is None else adds_people,
    )
    if not result.sealed_secret and not result.trusts_plain_headers:
        # Nothing would tell who is asking: every request would be refused.
        raise ValidationError({"jwt_secret": f"{KINDS[kind]} signs who is asking with its JWT secret "
                                             "(FORWARD_USER_INFO_HEADER_JWT_SECRET): give it, or trust "
                                             "plain headers instead."})
    return result
