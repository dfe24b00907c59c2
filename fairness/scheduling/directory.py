"""The gateway's in-memory view of the replicas, reloaded when the config epoch changes.

Pure data: the gateway reads it from the database (gateway/replica_rows.py).
"""

from __future__ import annotations

from dataclasses import dataclass

# What a replica runs its model as (Replica.ModelKind), and so which endpoints it takes.
CHAT_MODEL = "chat"
EMBEDDING_MODEL = "embedding"
RERANKER_MODEL = "reranker"


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
    tiers: frozenset[str] = frozenset()  # empty: serves every tier
    model_kind: str = CHAT_MODEL
    created: int = 0  # when it was added (Unix seconds)
    gpu_metrics_url: str = ""  # its GPU's DCGM exporter, read by the poller only

    def serves(self, tier: str) -> bool:
        return not self.tiers or tier in self.tiers


class ReplicaDirectory:
    """Enabled replicas grouped by the model they serve, and by deployment.

    A tier's deployment of a model is the set of replicas that serve both. Admission counts
    engine slots per deployment, so an interactive-only and a batch-only deployment side by side
    each have capacity of their own. Deployments must be equal or disjoint: two that share some
    replicas but not all would each count the shared slots (deployment_conflict refuses that).
    """

    def __init__(self, replicas: list[ReplicaInfo]) -> None:
        self.all = replicas
        self.by_model: dict[str, list[ReplicaInfo]] = {}
        for replica in replicas:
            self.by_model.setdefault(replica.model, []).append(replica)

    def models(self) -> list[str]:
        return sorted(self.by_model)

    def serving(self, model: str, tier: str | None = None) -> list[ReplicaInfo]:
        replicas = self.by_model.get(model, [])
        return replicas if tier is None else [r for r in replicas if r.serves(tier)]

    def kind(self, model: str) -> str | None:
        """What the model is run as (every replica of a model says the same: deployment_conflict)."""
        replicas = self.by_model.get(model)
        return replicas[0].model_kind if replicas else None

    def group(self, model: str, tier: str) -> str:
        """The admission capacity group of this tier's deployment of the model."""
        return self._group_name(model, self.serving(model, tier))

    def groups(self) -> dict[str, list[ReplicaInfo]]:
        """Every deployment: capacity group -> its replicas."""
        found: dict[str, list[ReplicaInfo]] = {}
        for model, replicas in self.by_model.items():
            named = set().union(*(r.tiers for r in replicas))
            deployments = [self.serving(model, tier) for tier in named]
            unrestricted = [r for r in replicas if not r.tiers]
            if unrestricted:  # what tiers that no replica names get
                deployments.append(unrestricted)
            for members in deployments:
                found[self._group_name(model, members)] = members
        return found

    def deployments(self, model: str) -> dict[frozenset[str], set[str]]:
        """Each distinct deployment of the model (replica names) -> the tiers it serves
        ("" stands for every tier no replica names)."""
        replicas = self.by_model.get(model, [])
        found: dict[frozenset[str], set[str]] = {}
        for tier in set().union(*(r.tiers for r in replicas)):
            found.setdefault(frozenset(r.name for r in self.serving(model, tier)), set()).add(tier)
        unrestricted = frozenset(r.name for r in replicas if not r.tiers)
        if unrestricted:
            found.setdefault(unrestricted, set()).add("")
        return found

    def _group_name(self, model: str, members: list[ReplicaInfo]) -> str:
        if len(members) == len(self.by_model.get(model, [])):
            return model
        return model + "@" + "+".join(sorted(r.name for r in members))


def deployment_conflict(replicas: list[ReplicaInfo]) -> str | None:
    """Why these replicas would have some engine slots counted twice, or None when they would not."""
    directory = ReplicaDirectory(replicas)
    for model in directory.models():
        kinds = {r.model_kind for r in directory.serving(model)}
        if len(kinds) > 1:
            return (f"Model {model}: its replicas would serve it as {' and as '.join(sorted(kinds))} models. "
                    "A model is one kind on every replica; give the others another name.")
        deployments = sorted(directory.deployments(model).items(), key=lambda d: sorted(d[0]))
        for index, (first, first_tiers) in enumerate(deployments):
            for second, second_tiers in deployments[index + 1:]:
                shared = first & second
                if shared:
                    return (
                        f"Model {model}: {_tiers(first_tiers)} would run on {_names(first)} and "
                        f"{_tiers(second_tiers)} on {_names(second)}. Sharing {_names(shared)} but not "
                        f"the rest, each would count {_names(shared)}'s slots as its own and the engine "
                        "could be sent twice what it runs at once. Give the replicas of one model the "
                        "same tiers, or tiers that do not overlap."
                    )
    return None


def _tiers(names: set[str]) -> str:
    named = sorted(n for n in names if n)
    words = [f"tier {', '.join(named)}" if len(named) == 1 else f"tiers {', '.join(named)}"] if named else []
    if "" in names:
        words.append("every tier no replica names")
    return " and ".join(words)


def _names(replicas: frozenset[str]) -> str:
    return ", ".join(sorted(replicas))
