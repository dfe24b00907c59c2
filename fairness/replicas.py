"""The gateway's in-memory view of the replicas, reloaded when the config epoch changes."""

from __future__ import annotations

from dataclasses import dataclass

from fairness.models import Replica


@dataclass(frozen=True)
class ReplicaInfo:
    id: int
    name: str
    base_url: str
    model: str
    engine_kind: str
    max_num_seqs: int
    priority_policy: bool
    api_key: str

    @classmethod
    def of(cls, replica: Replica) -> "ReplicaInfo":
        return cls(
            id=replica.pk,
            name=replica.name,
            base_url=replica.base_url.rstrip("/"),
            model=replica.model,
            engine_kind=replica.engine_kind,
            max_num_seqs=replica.max_num_seqs,
            priority_policy=replica.scheduling_policy == Replica.Policy.PRIORITY,
            api_key=replica.api_key,
        )


class ReplicaDirectory:
    """Enabled replicas grouped by the model they serve."""

    def __init__(self, replicas: list[ReplicaInfo]) -> None:
        self.by_model: dict[str, list[ReplicaInfo]] = {}
        for replica in replicas:
            self.by_model.setdefault(replica.model, []).append(replica)

    @classmethod
    async def load(cls) -> "ReplicaDirectory":
        rows = [ReplicaInfo.of(r) async for r in Replica.objects.filter(enabled=True)]
        return cls(rows)

    def models(self) -> list[str]:
        return sorted(self.by_model)

    def serving(self, model: str) -> list[ReplicaInfo]:
        return self.by_model.get(model, [])

    def slots(self, model: str) -> int:
        return sum(r.max_num_seqs for r in self.serving(model))
