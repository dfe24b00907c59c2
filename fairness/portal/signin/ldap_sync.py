"""The directory's people, checked every GP_LDAP_SYNC_SECONDS (Celery beat): someone gone from the
directory is deactivated (their keys stop on every gateway within about a second, as a staff
deactivation does; audited as `ldap`), and everyone still there has their memberships follow
their groups, as at a sign-in, without waiting for one.

All of the directory is read before anything changes, and a directory that cannot be reached or
searched changes nothing: an outage must never look like everyone leaving. For the same reason a
directory that knows none of two or more accounts it made is taken as misconfigured (a wrong
search base), not as everyone gone at once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.contrib.auth import get_user_model

from fairness.actions.account_origin import is_directory_account
from fairness.models import AuditEntry
from fairness.portal.signin import group_sync
from fairness.portal.signin.ldap_backend import follow_groups
from fairness.portal.signin.ldap_directory import DirectoryUnavailable, Person, connection, look_up
from fairness.store import task_locks
from fairness.store.redis_clients import redis_sync

if TYPE_CHECKING:
    from django.contrib.auth.models import User

    # Celery ships no types: its decorator as the checker is to see it (the tasks stay Any to it).
    def shared_task(**options: Any) -> Callable[[Callable[..., Any]], Any]: ...
else:
    from celery import shared_task

log = logging.getLogger(__name__)


@dataclass
class DirectorySync:
    checked: int = 0
    gone: list[str] = field(default_factory=list)
    without_access: list[str] = field(default_factory=list)  # still there, in no mapped group
    changed_nothing: str = ""  # why, when the directory's answer was not trusted


def directory_accounts() -> list[User]:
    """Every account the directory sign-in made, active or not (a sync may reactivate)."""
    made = set(AuditEntry.objects.filter(action="user.create", actor_name="ldap", actor=None)
               .values_list("target", flat=True))
    users = get_user_model().objects.filter(username__in=made).order_by("username")
    return [user for user in users if is_directory_account(user.get_username())]


def sync_directory() -> DirectorySync:
    """One pass over the directory's accounts; what it found and did."""
    report = DirectorySync()
    if not settings.GP_LDAP_SERVER_URI:
        return report
    users = directory_accounts()
    found: dict[int, Person | None] = {}
    try:
        with connection() as conn:
            for user in users:
                found[user.pk] = look_up(conn, user.get_username())
    except DirectoryUnavailable as exc:
        report.changed_nothing = f"the directory could not be searched ({exc})"
        log.warning("LDAP sync changed nothing: %s", report.changed_nothing)
        return report
    report.checked = len(users)
    if len(users) >= 2 and not any(found.values()):
        report.changed_nothing = (f"the directory knows none of the {len(users)} accounts it made: is "
                                  "GP_LDAP_USER_SEARCH_BASE or GP_LDAP_USER_FILTER right?")
        log.warning("LDAP sync changed nothing: %s", report.changed_nothing)
        return report
    actor = group_sync.sync_actor("ldap")
    for user in users:
        person = found[user.pk]
        if person is None:
            report.gone.append(user.get_username())
            group_sync.withdraw_access(actor, user)
            if user.is_active:  # staff: switching them off is a superuser's decision (group_sync)
                log.warning("LDAP sync: %s is gone from the directory but is staff, so left active",
                            user.get_username())
        elif not follow_groups(actor, user, person).has_access:
            report.without_access.append(user.get_username())
    if report.gone:
        log.info("LDAP sync: gone from the directory: %s", ", ".join(report.gone))
    return report


@shared_task(name="fairness.sync_ldap_users", expires=600)
def sync_ldap_users() -> dict[str, object]:
    # Alone (a second beat's run would withdraw and audit the same people twice); the lock
    # outlives a slow directory's pass.
    with task_locks.run_alone(redis_sync(), "sync_ldap_users", lifetime=1800.0) as mine:
        report = sync_directory() if mine else DirectorySync(changed_nothing="another sync is running")
    return {"checked": report.checked, "gone": report.gone, "without_access": report.without_access,
            "changed_nothing": report.changed_nothing}
