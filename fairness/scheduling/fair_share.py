"""Slurm's classic fair-share factor over a tree of accounts, with usage that decays.

An association (a user in an account) has a normalised share S: the product, down the tree, of
each node's shares over the sum of its siblings' shares, the last step being the member's shares
among the account's members. Its usage U is its part of everyone's decayed usage, so F = 2^(-U/S):
1 for whoever has used nothing, 0.5 for exactly one's share, towards 0 beyond it. Usage decays
exponentially with a half-life, stored as (value, the time it was valued at), so no task ever has
to walk all associations to decay them; the admission scripts compute the same (lua/lib/fair_share.lua).

Pure Python: no Django, no Redis.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Node:
    parent: object | None  # the parent node's id, None at the top
    shares: int


def normalised_shares(nodes: Mapping[object, Node]) -> dict[object, float]:
    """Every node's share of the whole: its shares over its siblings' (top-level nodes are one
    another's siblings), times its parent's normalised share."""
    sibling_total: dict[object, int] = {}
    for node in nodes.values():
        sibling_total[node.parent] = sibling_total.get(node.parent, 0) + node.shares
    shares: dict[object, float] = {}

    def share_of(node_id: object, depth: int = 0) -> float:
        if node_id in shares:
            return shares[node_id]
        if depth > len(nodes):
            raise ValueError("the account tree has a cycle")
        node = nodes[node_id]
        above = 1.0 if node.parent is None else share_of(node.parent, depth + 1)
        total = sibling_total[node.parent]
        shares[node_id] = above * node.shares / total if total else 0.0
        return shares[node_id]

    for node_id in nodes:
        share_of(node_id)
    return shares


def level_shares(nodes: Mapping[object, Node]) -> dict[object, float]:
    """Every node's shares over its siblings' alone (Fair Tree's S at its own level)."""
    sibling_total: dict[object, int] = {}
    for node in nodes.values():
        sibling_total[node.parent] = sibling_total.get(node.parent, 0) + node.shares
    return {node_id: node.shares / sibling_total[node.parent] if sibling_total[node.parent] else 0.0
            for node_id, node in nodes.items()}


def level_fs(level_share: float, usage: float, siblings_usage: float) -> float:
    """Slurm's LevelFS, S/U among siblings: above 1 under its share, below 1 over it. Infinite
    for nothing used (Slurm prints "inf"): it would come first among its siblings."""
    if usage <= 0 or siblings_usage <= 0:
        return math.inf
    return level_share / (usage / siblings_usage)


def decayed(value: float, valued_at: float, now: float, half_life: float) -> float:
    """`value` as of `valued_at`, decayed to `now` (seconds; half_life in seconds)."""
    if half_life <= 0:
        return 0.0
    return value * math.pow(2.0, -max(0.0, now - valued_at) / half_life)


def factor(usage: float, total: float, share: float) -> float:
    """F = 2^(-U/S), U = usage / total. Nobody has used anything: 1. No share: 0 once used."""
    if total <= 0 or usage <= 0:
        return 1.0
    if share <= 0:
        return 0.0
    return math.pow(2.0, -(usage / total) / share)


def weighted_tokens(
    prompt: float, completion: float, w_prompt: float, w_completion: float,
    cached: float = 0, w_cached: float | None = None,
) -> float:
    """What one request charges its association: its uncached prompt tokens at `w_prompt`, the
    `cached` ones the engine found in its prefix cache at `w_cached` (by default `w_prompt`), its
    completion at `w_completion`. The counts come from an engine, so a negative or NaN count is 0
    and more cached tokens than the prompt holds are the prompt."""
    prompt, completion = _count(prompt), _count(completion)
    cached = min(_count(cached), prompt)
    w_cached = w_prompt if w_cached is None else w_cached
    return w_prompt * (prompt - cached) + w_cached * cached + w_completion * completion


def _count(value: float) -> float:
    return value if value > 0 else 0  # NaN compares false: 0
