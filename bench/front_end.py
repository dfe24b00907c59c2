"""A front end's key in a bench portal, and the people it names.

A member's key becomes Open WebUI's as tests/people sets one up (front_end "openwebui", its JWT
secret sealed); every request through it carries a freshly minted X-OpenWebUI-User-Jwt (HS256,
exp 300 s), minted exactly as open-webui 0.12.4 mints it (tests/people/openwebui.py). The gateway
adds a person to the key's account the first time it is named; ``person`` then finds them.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from bench.harness import Member
from bench.load import Target
from tests.people.openwebui import SECRET, OpenWebUIUser, mint_forward_user_jwt

JWT_HEADER = "X-OpenWebUI-User-Jwt"


@dataclass(frozen=True)
class ForwardedUser:
    """A person as the front end names them; picklable, so load-generator processes mint too.

    Open WebUI's iat is in whole seconds, so a person's requests within one second carry the same
    token; ``new_tokens`` adds a random jti, so that no token is ever sent twice (the cost of a
    token the gateway has not seen, as when a person's requests are seconds apart)."""

    id: str
    email: str
    name: str
    jwt_secret: str = SECRET
    new_tokens: bool = False

    def headers(self) -> dict[str, str]:
        """A fresh token, as Open WebUI mints one for every request it forwards."""
        user = OpenWebUIUser(self.id, self.email, self.name)
        extra = {"jti": secrets.token_hex(8)} if self.new_tokens else {}
        return {JWT_HEADER: mint_forward_user_jwt(user, secret=self.jwt_secret, **extra)}


@dataclass(frozen=True)
class FrontEndTarget(Target):
    """The front end's key, each request naming ``user`` with a fresh token."""

    user: ForwardedUser | None = None

    def headers(self) -> dict[str, str]:
        return super().headers() | (self.user.headers() if self.user else {})


def people(names: tuple[str, ...]) -> dict[str, ForwardedUser]:
    return {name: ForwardedUser(f"owui-{name}", f"{name}@bench.invalid", name.title()) for name in names}


def make_front_end(key_id: int, jwt_secret: str = SECRET) -> None:
    """Turn a key into Open WebUI's. Saving it bumps the config epoch, so gateways reload it."""
    from fairness.gateway.front_end_secrets import seal
    from fairness.models import ApiKey

    ApiKey.objects.filter(pk=key_id).update(front_end="openwebui", front_end_secret=seal(jwt_secret))
    ApiKey.objects.get(pk=key_id).save()


def person(front_end: Member, user: ForwardedUser, username: str) -> Member:
    """The person the gateway added for ``user``, as a member speaking through ``front_end``'s
    key: their association (membership in the key's account) and unit (their user id)."""
    from django.contrib.auth import get_user_model

    from fairness.models import ApiKey, Membership

    account = ApiKey.objects.select_related("membership").get(pk=front_end.key_id).membership.account_id
    row = get_user_model().objects.get(email__iexact=user.email)
    membership = Membership.objects.get(user=row, account_id=account)
    return Member(username, front_end.tier, front_end.secret, front_end.key_id, str(membership.pk), row.pk)
