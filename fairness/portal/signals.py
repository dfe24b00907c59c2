"""The receivers, all here: any change to keys, tiers, replicas, accounts, budgets or a user's
activation bumps the config epoch (see store/config_epoch.py); a batch file's row takes its stored
content with it; signing out ends the playground's key of the session, and a new password every
such key of its person (actions/playground.py)."""

from typing import Any

from django.conf import settings
from django.contrib.auth.signals import user_logged_out
from django.core.files.storage import storages
from django.db import models, transaction
from django.db.models.signals import m2m_changed, post_delete, post_save, pre_save
from django.dispatch import receiver
from django.http import HttpRequest

from fairness.actions.audit import Actor
from fairness.actions.playground import SESSION_FIELD, end_every_session, end_session
from fairness.models import BATCH_FILES_STORAGE, Account, ApiKey, BatchFile, Budget, Membership, Replica, Tier
from fairness.portal.client_address import client_address
from fairness.store.config_epoch import bump_epoch


@receiver([post_save, post_delete], sender=ApiKey)
@receiver([post_save, post_delete], sender=Account)  # a share changes keys' normalised shares
@receiver([post_save, post_delete], sender=Membership)
@receiver([post_save, post_delete], sender=Budget)
@receiver([post_save, post_delete], sender=Tier)
@receiver([post_save, post_delete], sender=Replica)
def config_changed(sender: type[models.Model], **kwargs: Any) -> None:
    # After commit, or a gateway could reload the old row and keep it for a whole cache TTL.
    transaction.on_commit(bump_epoch)


@receiver(post_save, sender=settings.AUTH_USER_MODEL)
def user_changed(sender: type[models.Model], created: bool = False, update_fields: frozenset[str] | None = None,
                 **kwargs: Any) -> None:
    # A gateway's cached key carries whether its owner is active: deactivating a user stops
    # their keys as fast as a revocation. A save that cannot have changed it (the last_login of
    # every sign-in, a password) leaves every gateway's caches alone, as does a brand-new user.
    if not created and (update_fields is None or "is_active" in update_fields):
        transaction.on_commit(bump_epoch)


@receiver(m2m_changed, sender=Replica.tiers.through)
def deployment_changed(sender: type[models.Model], **kwargs: Any) -> None:
    transaction.on_commit(bump_epoch)


@receiver(post_delete, sender=BatchFile)
def batch_file_deleted(sender: type[BatchFile], instance: BatchFile, **kwargs: Any) -> None:
    """However a row goes (the API, its owner deleted), its content goes too, once that commits."""
    name = instance.stored_name
    transaction.on_commit(lambda: storages[BATCH_FILES_STORAGE].delete(name))


@receiver(user_logged_out)
def playground_key_ends(sender: type, request: HttpRequest | None, user: Any, **kwargs: Any) -> None:
    # Every way out (the sign-out button, OpenID Connect's) goes through auth.logout, which
    # sends this before it forgets the session: its key is still known here.
    if request is not None and user is not None:
        end_session(Actor(user, client_address(request)), user, request.session.session_key or "",
                    earlier=request.session.get(SESSION_FIELD, ""))


@receiver(pre_save, sender=settings.AUTH_USER_MODEL)
def note_new_password(sender: type[models.Model], instance: Any, update_fields: frozenset[str] | None = None,
                      **kwargs: Any) -> None:
    # However the password is set (the pages, the Django admin, `manage.py changepassword`), it
    # signs its person out of every other session; the sessions' playground keys must end too.
    if instance.pk is None or (update_fields is not None and "password" not in update_fields):
        return
    before = sender._default_manager.filter(pk=instance.pk).values_list("password", flat=True).first()
    instance._playground_keys_end = before is not None and before != instance.password


@receiver(post_save, sender=settings.AUTH_USER_MODEL)
def playground_keys_end_with_password(sender: type[models.Model], instance: Any, **kwargs: Any) -> None:
    if getattr(instance, "_playground_keys_end", False):
        instance._playground_keys_end = False
        end_every_session(Actor(None, name="password change"), instance)
