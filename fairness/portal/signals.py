"""Any change to keys, tiers or replicas bumps the config epoch (see epoch.py)."""

from django.db import transaction
from django.db.models.signals import m2m_changed, post_delete, post_save
from django.dispatch import receiver

from fairness.models import ApiKey, Replica, Tier
from fairness.store.config_epoch import bump_epoch


@receiver([post_save, post_delete], sender=ApiKey)
@receiver([post_save, post_delete], sender=Tier)
@receiver([post_save, post_delete], sender=Replica)
def config_changed(sender, **kwargs) -> None:
    # After commit, or a gateway could reload the old row and keep it for a whole cache TTL.
    transaction.on_commit(bump_epoch)


@receiver(m2m_changed, sender=Replica.tiers.through)
def deployment_changed(sender, **kwargs) -> None:
    transaction.on_commit(bump_epoch)
