"""The one e-mail a key's owner gets when it is about to expire.

A key is due when it is live, expires within NOTICE_BEFORE, and was not noticed since that
window opened for its current expiry: `expiry_noticed_at` records the notice, so each key is
mailed once per expiry date (a key whose expiry staff extend is noticed again before its new
date). The key is claimed by a conditional UPDATE before its mail goes, so two workers never both
send it; a mail that fails gives the claim back for the next run. Left out: keys of deactivated
owners, owners with no address (they are mailed once one is set) and keys in their grace after a
rotation (their successor is live already), and the playground's keys, which end with the browser
session they were made for. /me/ and the staff home list the same keys.
"""

from __future__ import annotations

import datetime as dt
import logging

from django.core.mail import send_mail
from django.db.models import F, Q, QuerySet
from django.utils import timezone

from fairness.models import ApiKey, AuditEntry

log = logging.getLogger(__name__)

NOTICE_BEFORE = dt.timedelta(days=7)
# The playground's keys (fairness/actions/playground.py) are issued under this audit action: how
# every part tells them from the keys a person holds.
SESSION_KEY_ACTION = "key.playground"


def session_key_prefixes() -> QuerySet[AuditEntry, str]:
    """The prefixes of the keys made for one browser session each, for `prefix__in`."""
    return AuditEntry.objects.filter(action=SESSION_KEY_ACTION).values_list("target", flat=True)


def due(now: dt.datetime) -> QuerySet[ApiKey]:
    rotated = AuditEntry.objects.filter(action="key.rotate").values("target")
    return (
        ApiKey.objects.filter(revoked_at=None, expires_at__gt=now, expires_at__lte=now + NOTICE_BEFORE,
                              owner__is_active=True)
        .exclude(owner__email="")
        .filter(Q(expiry_noticed_at=None) | Q(expiry_noticed_at__lt=F("expires_at") - NOTICE_BEFORE))
        .exclude(prefix__in=rotated)
        .exclude(prefix__in=session_key_prefixes())
    )


def message(key: ApiKey) -> tuple[str, str]:
    """(subject, body) of the notice."""
    assert key.expires_at is not None
    when = key.expires_at.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    label = f" (“{key.label}”)" if key.label else ""
    subject = f"gpuportal: your key {key.prefix}… expires on {when[:10]}"
    body = (
        f"Your key {key.prefix}…{label}, tier {key.tier.name}, stops working at {when}; after that the "
        "gateway refuses its requests with 401.\n\n"
        "Make a new key on your page, /me/keys/ (or ask staff for one if your tier's keys are issued by "
        "staff), and switch your jobs to it before then. Rotating keeps the expiry, so it does not help here.\n\n"
        "This is the only notice about this key.\n"
    )
    return subject, body


def notify_expiring(now: dt.datetime | None = None) -> int:
    """Mails each due key's owner once; returns how many mails went out."""
    now = now or timezone.now()
    sent = 0
    for key in due(now).select_related("owner", "tier"):
        if not due(now).filter(pk=key.pk).update(expiry_noticed_at=now):
            continue  # another worker claimed it
        subject, body = message(key)
        try:
            send_mail(subject, body, None, [key.owner.email])
        except OSError:  # smtplib's errors among them: the next run tries again
            log.warning("could not mail the expiry notice of %s… to its owner", key.prefix, exc_info=True)
            ApiKey.objects.filter(pk=key.pk).update(expiry_noticed_at=key.expiry_noticed_at)
            continue
        sent += 1
    return sent
