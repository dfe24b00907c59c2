"""Deployments of one model must be the same replicas or separate ones, never partly shared."""

import pytest

from fairness.scheduling.directory import (
    CHAT_MODEL,
    EMBEDDING_MODEL,
    RERANKER_MODEL,
    ReplicaDirectory,
    ReplicaInfo,
    deployment_conflict,
)


def replica(name: str, *tiers: str, model: str = "m") -> ReplicaInfo:
    return ReplicaInfo(id=0, name=name, base_url=f"http://{name}.invalid", model=model, engine_kind="vllm",
                       max_num_seqs=8, priority_policy=False, api_key="", tiers=frozenset(tiers))


@pytest.mark.parametrize("replicas", [
    [replica("r1"), replica("r2")],  # one deployment for everyone
    [replica("r1", "interactive"), replica("r2", "batch")],  # side by side
    [replica("r1", "interactive", "batch"), replica("r2", "batch", "interactive")],
    [replica("r1", "batch"), replica("r2", model="other")],  # models never share slots
], ids=["all-shared", "disjoint", "same-tiers", "two-models"])
def test_equal_or_disjoint_deployments_are_fine(replicas):
    assert deployment_conflict(replicas) is None


@pytest.mark.parametrize(("replicas", "shared"), [
    ([replica("r1"), replica("r2", "batch")], "r1"),  # batch spills onto the shared replica
    ([replica("r1", "interactive", "batch"), replica("r2", "batch")], "r1"),
    ([replica("r1", "batch"), replica("r2")], "r2"),
], ids=["unrestricted-and-batch", "both-and-batch", "batch-and-unrestricted"])
def test_partly_shared_deployments_are_named_with_the_replica_they_would_count_twice(replicas, shared):
    conflict = deployment_conflict(replicas)
    assert conflict is not None
    assert f"count {shared}'s slots as its own" in conflict and "twice" in conflict


def test_the_deployments_list_tiers_by_the_replicas_they_run_on():
    directory = ReplicaDirectory([replica("r1", "interactive", "batch"), replica("r2", "batch"), replica("r3")])
    assert directory.deployments("m") == {
        frozenset({"r1", "r3"}): {"interactive"},
        frozenset({"r1", "r2", "r3"}): {"batch"},
        frozenset({"r3"}): {""},
    }


def test_a_model_is_one_kind_on_every_replica():
    embedding = ReplicaInfo(id=0, name="e1", base_url="http://e1.invalid", model="m", engine_kind="vllm",
                            max_num_seqs=8, priority_policy=False, api_key="", model_kind=EMBEDDING_MODEL)
    conflict = deployment_conflict([replica("r1"), embedding])
    assert conflict is not None and "as chat and as embedding models" in conflict
    assert deployment_conflict([replica("r1"), replica("e1", model="embedder")]) is None
    assert ReplicaDirectory([replica("r1"), embedding]).kind("m") == CHAT_MODEL  # the first says, until fixed


def test_the_directorys_kinds_are_the_replica_rows_choices():
    from fairness.models import Replica

    assert set(Replica.ModelKind.values) == {CHAT_MODEL, EMBEDDING_MODEL, RERANKER_MODEL}
