"""Sign-in with the institution's LDAP directory, on django-auth-ldap, through the password form
(and so its lockout).

The library finds the person with the user search (the portal's own bind), checks the password
by binding as them and reads their groups. What we add:

- Only directory accounts: the portal user is made at the first sign-in (audited as `ldap`), and
  a username that belongs to an account made any other way (by staff, a command, the OIDC
  sign-in) is never signed in from the directory, so a directory entry cannot take over a local
  staff account of the same name. Such a name is not even looked up.
- Memberships follow the groups at every sign-in (group_sync), matched as mapping_names() says.
  Someone in no mapped group is refused with a message and deactivated, as with OIDC.
- A directory that cannot be reached refuses the sign-in with a message that says so, not as a
  wrong password. The library swallows LDAP errors and reports them only by its `ldap_error`
  signal, whose receivers may raise instead (its documented way out): ours does.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, cast

import ldap
import ldap.dn
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.dispatch import receiver
from django.http import HttpRequest
from django_auth_ldap.backend import LDAPBackend, ldap_error

from fairness.actions.account_origin import is_directory_account
from fairness.actions.audit import Actor
from fairness.actions.users import create_user
from fairness.models import GroupMapping
from fairness.portal.client_address import client_address
from fairness.portal.signin import group_sync
from fairness.portal.signin.ldap_directory import DirectoryUnavailable, Person, describe, library_settings, person_from

if TYPE_CHECKING:
    from django.contrib.auth.models import User

log = logging.getLogger(__name__)

UNAVAILABLE = ("The institution's directory cannot be reached just now, so directory accounts cannot sign in. "
               "Try again in a few minutes; staff can still sign in with their local password.")
NO_MAPPED_GROUP = ("You are in none of the groups that have access to this portal, so your access (and your API "
                   "keys) are suspended. If you should have access, ask your group's administrator or the "
                   "portal's staff.")


def _canonical(group: str) -> str:
    """A DN with its spacing and case made canonical (`CN=Lab, OU=x` is `cn=lab,ou=x`); a bare name
    case-folded (cn matches without regard to case in LDAP)."""
    try:
        parts = ldap.dn.str2dn(group)
    except ldap.DECODING_ERROR:  # not a DN: a name
        return group.strip().casefold()
    return str(ldap.dn.dn2str(parts)).casefold()


def mapping_names(group_dns: Iterable[str], group_names: Iterable[str]) -> list[str]:
    """The group mappings the person's directory groups match: a mapping may name a group by its
    DN (`cn=nlp-lab,ou=groups,dc=uni,dc=example`, unambiguous) or by its cn (`nlp-lab`), either
    without regard to case or spacing."""
    theirs = {_canonical(dn) for dn in group_dns} | {name.strip().casefold() for name in group_names}
    return [group for group in GroupMapping.objects.values_list("group", flat=True) if _canonical(group) in theirs]


def follow_groups(actor: Actor, user: User, person: Person) -> group_sync.Synced:
    """Memberships from the directory's groups; no mapped group: no access (group_sync)."""
    synced = group_sync.sync_memberships(actor, user, mapping_names(person.group_dns, person.group_names))
    if synced.has_access:
        group_sync.restore_access(actor, user)
    else:
        group_sync.withdraw_access(actor, user)
    return synced


class DirectoryBackend(LDAPBackend):  # type: ignore[misc]  # untyped library
    @property
    def default_settings(self) -> dict[str, Any]:
        return library_settings()

    def authenticate(self, request: HttpRequest | None, username: str | None = None, password: str | None = None,
                     **kwargs: Any) -> User | None:
        """ValidationErrors reach the password form as its message: AuthenticationForm.clean() calls
        authenticate() and shows what it raises instead of "wrong username or password"."""
        if not username or not password:
            return None
        existing = get_user_model().objects.filter(username__iexact=username.strip()).first()
        if existing is not None and not is_directory_account(existing.get_username()):
            log.info("LDAP sign-in as %r not tried: a local account of that name exists", username)
            return None
        self.request = request
        try:
            user = super().authenticate(request, username=username, password=password, **kwargs)
            if user is None:
                return None
            ldap_user = user.ldap_user
            person = person_from(ldap_user.dn, ldap_user.attrs, ldap_user.group_dns, ldap_user.group_names)
        except DirectoryUnavailable as exc:
            log.warning("LDAP sign-in of %r failed: %s", username, exc)
            raise ValidationError(UNAVAILABLE, code="directory_unavailable") from exc
        except ldap.LDAPError as exc:  # the group search, after the library's own part
            log.warning("LDAP sign-in of %r failed: %s", username, describe(exc))
            raise ValidationError(UNAVAILABLE, code="directory_unavailable") from exc
        if person.email and person.email != user.email:
            user.email = person.email
            user.save(update_fields=["email"])
        if not follow_groups(self._actor(), user, person).has_access:
            raise ValidationError(NO_MAPPED_GROUP, code="no_mapped_group")
        return cast("User", user)  # the untyped library's: our user model, with its `ldap_user`

    def get_or_build_user(self, username: str, ldap_user: Any) -> tuple[User, bool]:
        """The portal's user for a directory entry, made (and audited) at the first sign-in."""
        user = get_user_model().objects.filter(username__iexact=username).first()
        if user is None:
            return create_user(self._actor(), username.lower()), False
        if not is_directory_account(user.get_username()):
            raise ldap_user.AuthenticationFailed("a local account holds this username")
        return user, False

    def get_user(self, user_id: int) -> User | None:
        """A deactivated user's session ends at their next request, as with ModelBackend."""
        user = super().get_user(user_id)
        return user if user is not None and user.is_active else None

    def _actor(self) -> Actor:
        request = getattr(self, "request", None)
        return group_sync.sync_actor("ldap", client_address(request) if request is not None else None)


@receiver(ldap_error, sender=DirectoryBackend, dispatch_uid="ldap-error-is-unavailable")
def _raise_unavailable(sender: type[DirectoryBackend], context: str, exception: ldap.LDAPError, **kwargs: Any) -> None:
    raise DirectoryUnavailable(describe(exception))
