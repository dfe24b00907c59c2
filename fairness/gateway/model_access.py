"""Which models a key may use: what its own list allows (staff's or its owner's narrowing), its
tier allows, its account allows and every account above that allows (an empty list allows every
model).

Worked out when a key is loaded into a gateway's cache (a change to a tier or an account bumps
the config epoch, which empties the caches), so the request path only looks a name up."""

from __future__ import annotations

from dataclasses import dataclass

from fairness.gateway.associations import charged_membership
from fairness.models import Account, ApiKey, Membership


@dataclass(frozen=True)
class ModelAccess:
    """Each restriction on the key's way, nearest first: (who, the models it allows). No
    restriction at all: every model."""

    limits: tuple[tuple[str, frozenset[str]], ...] = ()

    @property
    def allowed(self) -> frozenset[str] | None:
        """The models the key may use; None for every model."""
        if not self.limits:
            return None
        return frozenset.intersection(*(models for _, models in self.limits))

    def allows(self, model: str) -> bool:
        return self.refused_by(model) is None

    def refused_by(self, model: str) -> str | None:
        """Who keeps the key from `model` ("the batch tier", "account 'lab'"); None if nobody."""
        for who, models in self.limits:
            if model not in models:
                return who
        return None


EVERY_MODEL = ModelAccess()


def model_access_of(key: ApiKey) -> ModelAccess:
    """The key's own list, its tier, then its account and the accounts above it (a key whose owner
    is in no account yet answers to its own list and its tier alone)."""
    limits: list[tuple[str, frozenset[str]]] = []
    if key.allowed_models:
        limits.append(("the key's own model list", frozenset(key.allowed_models)))
    if key.tier.allowed_models:
        limits.append((f"the {key.tier.name} tier", frozenset(key.tier.allowed_models)))
    membership = charged_membership(key)
    account_id = None
    if membership is not None:
        account_id = Membership.objects.filter(pk=membership).values_list("account_id", flat=True).first()
    if account_id is not None:
        tree = {pk: (name, parent, allowed) for pk, name, parent, allowed
                in Account.objects.values_list("pk", "name", "parent_id", "allowed_models")}
        seen: set[int] = set()
        while account_id is not None and account_id in tree and account_id not in seen:
            seen.add(account_id)
            name, parent, allowed = tree[account_id]
            if allowed:
                limits.append((f"account '{name}'", frozenset(allowed)))
            account_id = parent
    return ModelAccess(tuple(limits))
