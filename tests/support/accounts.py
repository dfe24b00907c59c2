"""Account trees as staff would build them, usage charged to their memberships the way a gateway's
release round trip charges it, and the usage admission holds."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import redis.asyncio
from django.contrib.auth import get_user_model

from fairness.accounting.fair_share_usage import half_life_seconds
from fairness.actions import accounts
from fairness.gateway.associations import association_id
from fairness.models import Account, ApiKey, Membership
from fairness.scheduling.admission import Admission
from tests.support.audit import SETUP
from tests.support.redis_db import TEST_REDIS_URL


def charge(*amounts: tuple[Membership, float]) -> None:
    """Charge weighted tokens to associations, as a gateway's release round trip does."""

    async def send() -> None:
        client = redis.asyncio.Redis.from_url(TEST_REDIS_URL)
        admission = Admission(client, half_life_seconds=half_life_seconds())
        try:
            await admission.send(*(admission.charge_command(association_id(m.pk), a) for m, a in amounts))
        finally:
            await admission.close()
            await client.aclose()

    asyncio.run(send())


@dataclass
class LabTree:
    lab: Account
    nlp: Account
    alice: Membership  # alice in nlp, her default
    bob: Membership | None = None  # bob in lab, his default (with `bob_in_lab`)


def lab_tree(*, bob_in_lab: bool = False, keys_in_tree: bool = False) -> LabTree:
    """Over the cast: `lab` (2 shares) with `nlp` (1 share) under it, alice in nlp as her default;
    with `bob_in_lab`, bob in lab as his; with `keys_in_tree`, alice's and bob's keys charge those
    memberships (issuing gave each an account of their own)."""
    lab = accounts.add_account(SETUP, "lab", shares=2)
    nlp = accounts.add_account(SETUP, "nlp", parent=lab, shares=1)
    users = get_user_model().objects
    alice = accounts.add_member(SETUP, nlp, users.get(username="alice"), default=True)
    bob = accounts.add_member(SETUP, lab, users.get(username="bob"), default=True) if bob_in_lab else None
    if keys_in_tree:
        ApiKey.objects.filter(owner__username="alice").update(membership=alice)
        if bob is not None:
            ApiKey.objects.filter(owner__username="bob").update(membership=bob)
    return LabTree(lab, nlp, alice, bob)


def live_usage() -> tuple[dict[str, float], float]:
    """The fair-share usage admission holds now, by association, and its total."""

    async def read():
        client = redis.asyncio.Redis.from_url(TEST_REDIS_URL)
        admission = Admission(client)
        try:
            usage, total, _ = await admission.fair_share_usage()
            return usage, total
        finally:
            await admission.close()
            await client.aclose()

    return asyncio.run(read())


def association(member) -> str:
    """The association a cast member's key charges."""
    return str(ApiKey.objects.get(pk=member.key_id).membership_id)
