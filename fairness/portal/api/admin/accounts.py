"""The admin JSON API's accounts: the fair-share tree and where everyone stands in it (the same
authentication as the rest of the admin API, and every change audited)."""

from __future__ import annotations

import dataclasses

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.shortcuts import get_object_or_404
from ninja import Field, Router, Schema, Status
from ninja.errors import HttpError

from fairness.actions import accounts, lab_managers
from fairness.models import Account, Membership
from fairness.portal.api.admin.api import AdminTokenAuth, Input, ModelName, StaffSession, actor, invalid
from fairness.portal.reports import fair_share as fair_share_report
from fairness.portal.signed_in import AdminApiRequest

User = get_user_model()
router = Router(tags=["admin"], auth=[AdminTokenAuth(), StaffSession()])

FAIR_SHARE = (
    "Slurm's classic fair share, as `manage.py sshare` prints it. `norm_shares` S is an association's share "
    "of the whole card: down the tree, each account's shares over its siblings', the last step a member's "
    "shares over the account's members'. `raw_usage` is decayed weighted tokens (it halves every half-life; "
    "an account's row sums its whole subtree) and `effective_usage` U its part of everyone's. "
    "`fair_share` F = 2^(-U/S): 1 for nothing used, 0.5 for exactly one's share, towards 0 beyond it; "
    "within a tier, requests of a lower F queue later."
)


ALLOWED_MODELS = ("Models its members' keys, and those of the accounts under it, may use, as clients name them "
                  "(at most 50); empty for every model.")


class ShareRow(Schema):
    account: str
    user: str = Field(description='"" on an account\'s own row; a member\'s row follows its account\'s.')
    depth: int = Field(description="0 at the top of the tree; a member sits one below their account.")
    raw_shares: int
    norm_shares: float
    raw_usage: float
    norm_usage: float = Field(description="raw_usage over everyone's (Slurm's NormUsage; here equal to U).")
    effective_usage: float
    fair_share: float
    level_fs: float | None = Field(description="Slurm's LevelFS: its shares over its siblings' divided by its "
                                   "usage over its siblings' (above 1: under its share); null for infinite "
                                   "(nothing used).")


class AccountIn(Input):
    name: str = Field(min_length=1, max_length=100, pattern=r"^[\w.@+-]+$")
    parent: str | None = Field(None, max_length=100, description="The account it sits under; null for the top.")
    shares: int = Field(1, ge=1, le=accounts.MAX_SHARES, description="Its part of the parent's share, "
                        "relative to its siblings' shares.")
    description: str = Field("", max_length=200)
    allowed_models: list[ModelName] = Field(default_factory=list, description=ALLOWED_MODELS)


class AccountPatch(Input):
    shares: int | None = Field(None, ge=1, le=accounts.MAX_SHARES)
    parent: str | None = Field(None, max_length=100, description="The account to move it under; null moves it "
                               "to the top, leaving it out keeps it where it is.")
    allowed_models: list[ModelName] | None = Field(None, description=ALLOWED_MODELS + " Leave out to keep them.")


class AccountOut(Schema):
    name: str
    parent: str | None
    shares: int
    description: str
    allowed_models: list[str]


class MemberIn(Input):
    username: str = Field(min_length=1, max_length=150)
    shares: int | None = Field(None, ge=1, le=accounts.MAX_SHARES, description="Their part of the account's "
                               "share, relative to the other members'; 1 for a new member, leave out to keep "
                               "a member's.")
    default: bool = Field(False, description="Their keys that name no account charge this one from now on "
                                             "(a user's first account is their default anyway).")
    manager: bool | None = Field(None, description="Whether they manage the account and the accounts under it "
                                                   "(members, keys, sub-accounts, shares, budgets, within what "
                                                   "staff gave it); leave out to keep it as it is.")


class MemberOut(Schema):
    account: str
    username: str
    shares: int
    is_default: bool
    is_manager: bool


def account_out(account: Account) -> AccountOut:
    return AccountOut(name=account.name, parent=account.parent.name if account.parent else None,
                      shares=account.shares, description=account.description,
                      allowed_models=account.allowed_models)


def account_named(name: str, field: str) -> Account:
    account = Account.objects.filter(name=name).first()
    if account is None:
        raise HttpError(422, f"{field}: no account named {name!r}")
    return account


@router.get("/accounts", response=list[ShareRow], description=FAIR_SHARE,
            summary="Where every account and member stands (sshare -l): fair share F = 2^(-U/S)")
def list_accounts(request: AdminApiRequest) -> list[ShareRow]:
    return [ShareRow(**dataclasses.asdict(row)) for row in fair_share_report.rows()]


@router.post("/accounts", response={201: AccountOut}, summary="Add an account to the fair-share tree")
def create_account(request: AdminApiRequest, data: AccountIn) -> Status[AccountOut]:
    if Account.objects.filter(name=data.name).exists():
        raise HttpError(409, f"name: an account named {data.name!r} exists")
    parent = account_named(data.parent, "parent") if data.parent is not None else None
    try:
        account = accounts.add_account(actor(request), data.name, parent, data.shares, data.description,
                                       data.allowed_models)
    except ValidationError as exc:
        raise invalid(exc) from None
    return Status(201, account_out(account))


@router.patch("/accounts/{name}", response=AccountOut, summary="Change an account's shares or models, or move it")
def change_account(request: AdminApiRequest, name: str, data: AccountPatch) -> AccountOut:
    account = get_object_or_404(Account.objects.select_related("parent"), name=name)
    move = "parent" in data.model_fields_set
    parent = account_named(data.parent, "parent") if data.parent is not None else None
    try:  # a parent under the account itself is refused: the tree has no cycles
        return account_out(accounts.change_account(actor(request), account, shares=data.shares, parent=parent,
                                                   move=move, allowed_models=data.allowed_models))
    except ValidationError as exc:
        raise invalid(exc) from None


@router.post("/accounts/{name}/members", response={200: MemberOut, 201: MemberOut},
             summary="Add a user to an account (201), or change their shares or default there (200)")
def add_member(request: AdminApiRequest, name: str, data: MemberIn) -> Status[MemberOut]:
    account = get_object_or_404(Account, name=name)
    user = User.objects.filter(username=data.username).first()
    if user is None:
        raise HttpError(422, f"username: no user named {data.username!r}")
    created = not Membership.objects.filter(account=account, user=user).exists()
    membership = accounts.add_member(actor(request), account, user, default=data.default, shares=data.shares)
    if data.manager is not None:
        lab_managers.set_manager(actor(request), membership, data.manager)
    return Status(201 if created else 200, MemberOut(account=account.name, username=user.get_username(),
                                                     shares=membership.shares, is_default=membership.is_default,
                                                     is_manager=membership.is_manager))
