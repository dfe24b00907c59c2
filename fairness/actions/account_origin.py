"""Where a user's sign-in belongs: to the portal (a local password), to the institution's
directory (the LDAP sign-in made the account) or to its OpenID provider (an SSO identity is
linked to it).

Staff give local passwords to the first kind only: a password beside the directory's or the
provider's would be a second way in that the institution cannot close (leaving the directory, or
every mapped group, would no longer stop it), and a way for whoever set it to sign in as them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from fairness.models import AuditEntry, SsoIdentity

if TYPE_CHECKING:
    from django.contrib.auth.models import User

DIRECTORY = "the institution's directory"
PROVIDER = "the institution's sign-in service (SSO)"


def made_by(username: str, source: str) -> bool:
    """Whether the sync actor `source` ("ldap", "oidc") made this account: the latest `user.create`
    of its name is that actor's (the audit log is append-only, so this cannot be forged later)."""
    created = (AuditEntry.objects.filter(action="user.create", target=username).order_by("-pk")
               .values_list("actor_name", "actor_id").first())
    return created is not None and created[0] == source and created[1] is None


def is_directory_account(username: str) -> bool:
    return made_by(username, "ldap")


def signs_in_elsewhere(user: User) -> str:
    """Whose sign-in this account's is, in words ("" for the portal's own)."""
    if SsoIdentity.objects.filter(user=user).exists():
        return PROVIDER
    return DIRECTORY if is_directory_account(user.get_username()) else ""


def elsewhere_for(users: Iterable[User]) -> dict[int, str]:
    """signs_in_elsewhere() of many users at once, in two queries (for the users page): every
    identity, and every account's creation, of which there is about one per user ever made."""
    with_identity = set(SsoIdentity.objects.values_list("user_id", flat=True))
    made_by_actor: dict[str, tuple[str, int | None]] = {}
    for target, actor_name, actor_id in (AuditEntry.objects.filter(action="user.create").order_by("pk")
                                         .values_list("target", "actor_name", "actor_id")):
        made_by_actor[target] = (actor_name, actor_id)  # the latest creation of a name wins
    found = {}
    for user in users:
        if user.pk in with_identity:
            found[user.pk] = PROVIDER
        elif made_by_actor.get(user.get_username()) == ("ldap", None):
            found[user.pk] = DIRECTORY
    return found
