"""Which association a key's requests charge, and that association's normalised share.

Read when a key is loaded into a gateway's cache (a change to the tree bumps the config epoch,
which empties the caches), so the request path never touches the tree."""

from __future__ import annotations

from fairness.models import Account, ApiKey, Membership
from fairness.scheduling.fair_share import Node, normalised_shares


def tree_nodes() -> dict[object, Node]:
    """Accounts ("a<pk>") and memberships ("m<pk>", under their account) as one tree."""
    nodes: dict[object, Node] = {
        f"a{pk}": Node(f"a{parent}" if parent else None, shares)
        for pk, parent, shares in Account.objects.values_list("pk", "parent_id", "shares")
    }
    for pk, account, shares in Membership.objects.values_list("pk", "account_id", "shares"):
        nodes[f"m{pk}"] = Node(f"a{account}", shares)
    return nodes


def association_id(membership_id: int) -> str:
    """The name admission knows an association by."""
    return str(membership_id)


def charged_membership(key: ApiKey) -> int | None:
    """The key's association; a key issued around issue_key charges its owner's default."""
    if key.membership_id is not None:
        return key.membership_id
    return Membership.objects.filter(user_id=key.owner_id, is_default=True).values_list("pk", flat=True).first()


def association_of(key: ApiKey) -> tuple[str, float]:
    """(association id, normalised share S); ("", 0.0) for a key with no association at all."""
    membership = charged_membership(key)
    if membership is None:
        return "", 0.0
    return association_id(membership), normalised_shares(tree_nodes()).get(f"m{membership}", 0.0)
