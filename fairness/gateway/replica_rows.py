"""The replica directory read from the database, and the deployment rule checked on save."""

from __future__ import annotations

from asgiref.sync import sync_to_async
from django.db import close_old_connections

from fairness.models import Replica
from fairness.scheduling.directory import ReplicaDirectory, ReplicaInfo, deployment_conflict


def replica_info(replica: Replica, tiers: frozenset[str] = frozenset()) -> ReplicaInfo:
    return ReplicaInfo(
        id=replica.pk,
        name=replica.name,
        base_url=replica.base_url.rstrip("/"),
        model=replica.model,
        engine_kind=replica.engine_kind,
        max_num_seqs=replica.max_num_seqs,
        priority_policy=replica.scheduling_policy == Replica.Policy.PRIORITY,
        api_key=replica.api_key,
        tiers=tiers,
        model_kind=replica.model_kind,
        created=int(replica.created_at.timestamp()),
        gpu_metrics_url=replica.gpu_metrics_url,
    )


async def load_directory(include_draining: bool = False) -> ReplicaDirectory:
    """Enabled replicas; a draining one only when asked (polling still watches it)."""
    return ReplicaDirectory(await _rows(include_draining))


def conflict_if_saved(candidate: Replica, tiers: frozenset[str] | None = None) -> str | None:
    """The deployment conflict enabling or saving `candidate` (serving `tiers`; None keeps the
    ones it has) would make among the enabled replicas."""
    others = Replica.objects.filter(enabled=True).prefetch_related("tiers")
    if candidate.pk is not None:
        others = others.exclude(pk=candidate.pk)
        if tiers is None:
            tiers = frozenset(t.name for t in candidate.tiers.all())
    replicas = [replica_info(r, frozenset(t.name for t in r.tiers.all())) for r in others]
    if candidate.enabled:
        replicas.append(replica_info(candidate, tiers or frozenset()))
    return deployment_conflict(replicas)


@sync_to_async
def _rows(include_draining: bool) -> list[ReplicaInfo]:
    # No request cycle closes this thread's connection on the gateway: check it here.
    close_old_connections()
    replicas = Replica.objects.filter(enabled=True)
    if not include_draining:
        replicas = replicas.filter(draining=False)
    return [
        replica_info(replica, frozenset(t.name for t in replica.tiers.all()))
        for replica in replicas.prefetch_related("tiers")
    ]
