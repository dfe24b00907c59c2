"""Replicas to route over, as the gateway's directory describes them (no engine behind them)."""

from __future__ import annotations

from fairness.scheduling.directory import ReplicaInfo


def replica(name: str, max_num_seqs: int = 8, base_url: str = "http://127.0.0.1:9") -> ReplicaInfo:
    return ReplicaInfo(
        id=0,
        name=name,
        base_url=base_url,
        model="m",
        engine_kind="vllm",
        max_num_seqs=max_num_seqs,
        priority_policy=False,
        api_key="",
    )
