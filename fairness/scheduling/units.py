"""Whom admission's caps count: a person within a tier.

Every concurrency cap, queue bound and per-person rate limit counts a person's requests through
all their keys of one tier together: the keys they made, the ones staff issued them, and a front
end's key speaking for them. A person who also holds a key of another tier is held to that tier's
caps there (the tier is the service class staff gave them). Names hold no "|", the scripts'
separator: tiers are slugs."""

from __future__ import annotations


def unit_of(person_id: int, tier: str) -> str:
    return f"p{person_id}.{tier}"


def parse_unit(unit: str) -> tuple[int, str] | None:
    """(person id, tier) of a unit, or None for a name that is not one (a test's, say)."""
    person, dot, tier = unit.partition(".")
    if not dot or not tier or not person.startswith("p") or not person[1:].isdigit():
        return None
    return int(person[1:]), tier
