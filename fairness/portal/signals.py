"""The model signals, all here: any change to keys, tiers, replicas, accounts, budgets or a user's
activation bumps the config epoch (see store/config_epoch.py); a batch file's row takes its stored
content with it."""

from typing import Any

from django.conf import settings
from django.core.files.storage import storages
from django.db import models, transaction
from django.db.models.signals import m2m_changed, post_delete, post_save
from django.dispatch import receiver

from fairness.models import BATCH_FILES_STORAGE, Account, ApiKey, BatchFile, Budget, Membership, Replica, Tier
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
