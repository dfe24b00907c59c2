"""The playground's key: one per signed-in browser session, so /me/playground/ can call /v1/ from
the page's script through the very same gateway as any client (key check, queue, leases, budgets,
usage records).

- **Never stored.** Its secret is an HMAC of the session's key with SECRET_KEY: the same session
  gets the same secret on every page load, without the portal keeping it anywhere but as the
  SHA-256 every key is stored as. The session's key stays in its HttpOnly cookie; the secret gives
  nothing of it away.
- **Ends with the session.** It expires when the session does (no later than its tier's longest
  key life: the page pins the session's end to a date first), and is revoked when its person signs
  out or their password changes (portal/signals.py). Should a session still be moved on later
  (set_expiry elsewhere), its key's expiry follows. When Django gives the session a new session
  key (cycle_key) its data stays, and names the old key's prefix: that key ends as the new one
  is made, or at sign-out.
- **The same rules as one's own keys.** Whether they may have one at all, and its tier, are
  self_service's: a person with no access gets none. It is not one of the keys they hold
  (self_service.live_keys leaves it out), so it takes no place among the most they may hold.
- **One way to tell.** It is issued under its own audit action (key_expiry.SESSION_KEY_ACTION),
  which is how every other part knows it: no notice of its expiry, no rotation.
"""

from __future__ import annotations

import base64
import datetime as dt
from typing import TYPE_CHECKING

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone
from django.utils.crypto import salted_hmac
from django.views.decorators.debug import sensitive_variables

from fairness.accounting.key_expiry import SESSION_KEY_ACTION, session_key_prefixes
from fairness.actions import self_service
from fairness.actions.audit import Actor, audit
from fairness.actions.keys import issue_key, revoke
from fairness.gateway.api_keys import SECRET_PREFIX, VISIBLE_CHARS, hash_secret
from fairness.models import ApiKey

if TYPE_CHECKING:
    from django.contrib.auth.models import User

LABEL = "playground"
# In the session's data: the prefix of its key (never the secret), which outlives a new session key.
SESSION_FIELD = "playground_key_prefix"
_SALT = "fairness.actions.playground"  # keeps these HMACs apart from every other use of SECRET_KEY

Refused = self_service.Refused
NOT_YOURS = "This session's playground key is not yours: sign out and in again."
REVOKED = "This session's playground key was revoked: sign out and in again for a new one."
INACTIVE = "Your account is no longer active: ask staff if that is a mistake."


@sensitive_variables()
def secret_of(session_key: str) -> str:
    """The session's secret: 32 bytes of HMAC-SHA256, as long as a minted key's 32 random bytes."""
    digest = salted_hmac(_SALT, session_key, algorithm="sha256").digest()
    return SECRET_PREFIX + base64.urlsafe_b64encode(digest).decode().rstrip("=")


def session_key_row(session_key: str) -> ApiKey | None:
    """The key made for this session, if any (whoever owns it: the caller checks)."""
    return ApiKey.objects.filter(secret_hash=hash_secret(secret_of(session_key))).select_related("tier").first()


def _end_earlier(actor: Actor, user: User, earlier: str) -> None:
    """Revokes the key the session had under an earlier session key. Django gives a session a new
    key and keeps its data (cycle_key: a new password, a SECRET_KEY rotated into
    SECRET_KEY_FALLBACKS), so the session's data names the key it had (`earlier`, its prefix)."""
    if earlier:
        for key in ApiKey.objects.filter(prefix=earlier, owner=user, revoked_at=None,
                                         prefix__in=session_key_prefixes()):
            revoke(actor, key)


def _expiry(session_expires: dt.datetime, longest: dt.datetime | None) -> dt.datetime:
    return min(session_expires, longest) if longest is not None else session_expires


@sensitive_variables("secret")
def key_for_session(actor: Actor, session_key: str, session_expires: dt.datetime,
                    now: dt.datetime | None = None, earlier: str = "") -> tuple[ApiKey, str]:
    """The actor's key for this session, made on the first call; (the key, its secret). Raises
    Refused when they may have none, or when this session's key was revoked (by them on their
    keys page, or by staff): a revocation stands until they sign in again. `earlier`: the prefix
    of the key the session had, which a new one replaces (see _end_earlier)."""
    assert actor.user is not None, "a session belongs to a signed-in user"
    if not session_key:
        raise Refused("Your session has not started properly: sign out and in again.")
    now = now or timezone.now()
    secret = secret_of(session_key)
    try:
        return _key_for_session(actor, earlier, secret, session_expires, now)
    except _Raced:  # another page load of this session made it meanwhile: it is there now
        return _key_for_session(actor, earlier, secret, session_expires, now)


class _Raced(Exception):
    pass


@sensitive_variables("secret")
def _key_for_session(actor: Actor, earlier: str, secret: str, session_expires: dt.datetime,
                     now: dt.datetime) -> tuple[ApiKey, str]:
    assert actor.user is not None
    with transaction.atomic():
        # The row locked: two page loads at once make one key, not two.
        user = get_user_model().objects.select_for_update().get(pk=actor.user.pk)
        key = ApiKey.objects.filter(secret_hash=hash_secret(secret)).select_related("tier").first()
        if key is None:
            _end_earlier(actor, user, earlier)
            return _issue(actor, user, secret, session_expires, now), secret
        if key.owner_id != user.pk:  # a session belongs to one person: this is not theirs
            raise Refused(NOT_YOURS)
        if key.revoked_at is not None:
            raise Refused(REVOKED)
        if not user.is_active:
            raise Refused(INACTIVE)
        expires_at = _expiry(session_expires, self_service.longest_expiry(key.tier, key.created_at))
        if key.expires_at is None or expires_at > key.expires_at:
            key.expires_at = expires_at
            key.save(update_fields=["expires_at"])
            audit(actor, "key.playground.extend", key.prefix, expires_at=expires_at.isoformat())
        return key, secret


def _issue(actor: Actor, user: User, secret: str, session_expires: dt.datetime, now: dt.datetime) -> ApiKey:
    tier = self_service.own_tier(user, now)
    reason = self_service.access_refusal(user, tier)
    if reason:
        raise Refused(reason)
    assert tier is not None  # access_refusal() says why otherwise
    expires_at = _expiry(session_expires, self_service.longest_expiry(tier, now))
    if ApiKey.objects.filter(prefix=secret[:VISIBLE_CHARS]).exclude(secret_hash=hash_secret(secret)).exists():
        # Another key starts alike (a 1 in 2**48 chance): the derived secret cannot be drawn again.
        raise Refused("The playground cannot make a key for this session: sign out and in again.")
    try:
        key, _ = issue_key(user, tier, label=LABEL, expires_at=expires_at, created_by=user, secret=secret)
    except RuntimeError:  # its hash is taken: SQLite locks no row, so a page load alongside made it
        raise _Raced from None
    audit(actor, SESSION_KEY_ACTION, key.prefix, owner=user.get_username(), tier=tier.name,
          account=key.membership.account.name if key.membership else None, expires_at=expires_at.isoformat())
    return key


def refusal(user: User, session_key: str, now: dt.datetime) -> str:
    """Why the playground will not give this session a key ("" when it will): what
    key_for_session() would raise, for the page to say before its script asks."""
    key = session_key_row(session_key) if session_key else None
    if key is None:
        return self_service.access_refusal(user, self_service.own_tier(user, now))
    if key.owner_id != user.pk:
        return NOT_YOURS
    if key.revoked_at is not None:
        return REVOKED
    return "" if user.is_active else INACTIVE


@transaction.atomic
def end_session(actor: Actor, user: User, session_key: str, earlier: str = "") -> ApiKey | None:
    """Revokes the key of the session its person signs out of; None when it had none live.
    `earlier`: the prefix the session's data names (see _end_earlier)."""
    key = session_key_row(session_key) if session_key else None
    ended = None
    if key is not None and key.owner_id == user.pk and key.revoked_at is None:
        ended = revoke(actor, key)
    _end_earlier(actor, user, earlier)
    return ended


@transaction.atomic
def end_every_session(actor: Actor, user: User) -> int:
    """Revokes every playground key of theirs; how many. A new password signs them out of every
    other session (Django checks a session against the password it began with): their keys go too."""
    keys = ApiKey.objects.filter(owner=user, revoked_at=None, prefix__in=session_key_prefixes())
    ended = 0
    for key in keys.select_related("owner"):
        revoke(actor, key)
        ended += 1
    return ended
