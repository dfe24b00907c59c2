"""The admin JSON API's token budgets: where each stands, setting one (or a raise until a date)
and removing one (the same authentication as the rest of the admin API, every change audited)."""

from __future__ import annotations

import datetime as dt
from typing import Literal

from django.core.exceptions import ValidationError
from django.shortcuts import get_object_or_404
from django.utils import timezone
from ninja import Field, Router, Schema, Status
from pydantic import model_validator

from fairness.actions import budgets
from fairness.models import Budget
from fairness.portal.api.admin.api import AdminTokenAuth, Input, StaffSession, actor, invalid
from fairness.portal.reports.budgets import BudgetLine, all_lines
from fairness.portal.signed_in import AdminApiRequest

router = Router(tags=["admin"], auth=[AdminTokenAuth(), StaffSession()])

BUDGETS = (
    "A budget counts weighted tokens (as fair share does) per calendar day, week or month in the portal's "
    "time zone, or over a rolling window of `window_hours`. An account's budget counts its whole subtree; a "
    "user's, their association with one account; a key's, that key. A budget with `until` is a raise: until "
    "then it replaces the holder's standing budget of the same period. A request is refused with 429 once "
    "`used` + `reserved` (held by requests running now) reaches the limit."
)


class BudgetIn(Input):
    account: str | None = Field(None, max_length=100, description="An account's budget; with `user`, the "
                                "account of the user's association (leave out for their default account).")
    user: str | None = Field(None, max_length=150, description="A user's budget in one account.")
    key: str | None = Field(None, max_length=20, description="A key's budget, by the key's prefix.")
    tokens: int = Field(ge=1, le=10**15, description="Weighted tokens per period.")
    period: Literal["day", "week", "month", "rolling"] = "month"
    window_hours: int | None = Field(None, ge=1, le=24 * 366, description="Only for a rolling budget.")
    until: dt.datetime | dt.date | None = Field(None, description="A raise: until this moment, or through "
                                                "this day (YYYY-MM-DD, the portal's time zone).")

    @model_validator(mode="after")
    def _one_holder(self) -> BudgetIn:
        if self.key is not None and (self.account is not None or self.user is not None):
            raise ValueError("holder: a key's budget names only the key")
        if self.key is None and self.account is None and self.user is None:
            raise ValueError("holder: name an account, a user (and account) or a key")
        return self


class BudgetOut(Schema):
    id: int
    holder_kind: Literal["account", "user", "key"]
    holder: str = Field(description='"nlp", "alice in nlp", "key gp-abc123…".')
    account: str | None
    user: str | None
    key: str | None
    tokens: int
    period: str
    window_hours: int | None
    until: dt.datetime | None
    in_force: bool = Field(description="False for a standing budget a live raise replaces for now.")
    used: float = Field(description="Weighted tokens settled in the current window.")
    reserved: float = Field(description="Held by requests running now.")
    left: float
    fraction: float = Field(description="(used + reserved) / tokens.")
    elapsed: float = Field(description="The part of the period gone by (1 for a rolling window).")
    resets_at: dt.datetime = Field(description="The period's end (rolling: when a refused request may retry).")
    words: str


def budget_out(line: BudgetLine) -> BudgetOut:
    b, s = line.budget, line.status
    return BudgetOut(
        id=b.pk, holder_kind=line.holder_kind, holder=line.holder,  # type: ignore[arg-type]
        account=(b.account.name if b.account else b.membership.account.name if b.membership else None),
        user=b.membership.user.get_username() if b.membership else None,
        key=b.key.prefix if b.key else None, tokens=b.tokens, period=b.period, window_hours=b.window_hours,
        until=b.until, in_force=line.in_force, used=s.used, reserved=s.reserved, left=s.left,
        fraction=s.fraction, elapsed=s.elapsed, resets_at=line.resets_at, words=line.sentence,
    )


@router.get("/budgets", response=list[BudgetOut], description=BUDGETS,
            summary="Every budget and raise, with what is used, held and left, and when it resets")
def list_budgets(request: AdminApiRequest) -> list[BudgetOut]:
    return [budget_out(line) for line in all_lines()]


@router.post("/budgets", response={201: BudgetOut}, description=BUDGETS,
             summary="Set a budget (replacing the holder's standing one of the period), or a raise until a date")
def set_budget(request: AdminApiRequest, data: BudgetIn) -> Status[BudgetOut]:
    kind, name = ("key", data.key) if data.key else ("user", data.user) if data.user else ("account", data.account)
    try:
        holder = budgets.holder_of(kind, name or "", (data.account or "") if kind == "user" else "")
        until = data.until
        if isinstance(until, dt.datetime) and timezone.is_naive(until):
            until = timezone.make_aware(until)  # in the portal's time zone
        elif until is not None and not isinstance(until, dt.datetime):
            until = budgets.end_of_day(until)
        budget = budgets.set_budget(actor(request), **holder, tokens=data.tokens, period=data.period,
                                    window_hours=data.window_hours, until=until)
    except ValidationError as exc:
        raise invalid(exc) from None
    return Status(201, budget_out(next(line for line in all_lines() if line.budget.pk == budget.pk)))


@router.delete("/budgets/{budget_id}", response={204: None}, summary="Remove a budget or a raise")
def remove_budget(request: AdminApiRequest, budget_id: int) -> Status[None]:
    budgets.remove_budget(actor(request), get_object_or_404(Budget, pk=budget_id))
    return Status(204, None)
