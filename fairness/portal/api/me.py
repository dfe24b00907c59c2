"""The JSON API under /api/me/: a person's own standing, for scripts on their side of the card.

It authenticates the person asking, by one of their API keys (`Authorization: Bearer gp-...`) or
their signed-in session, and answers about that person only: no parameter names anyone, so no
request can ask about someone else. A key that could not send a request to /v1/ (revoked, expired,
its owner deactivated) cannot read this either, and every refusal is OpenAI-shaped, as /v1/'s are.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

from django.http import HttpRequest
from ninja import Field, Router, Schema
from ninja.security import APIKeyCookie, HttpBearer

from fairness.gateway.api_keys import hash_secret, parse_bearer
from fairness.gateway.errors import ApiError
from fairness.models import ApiKey
from fairness.portal.api.admin.budgets import BudgetOut, budget_out
from fairness.portal.reports.my_standing import AccountStanding, Priority, Waiting, standing_for
from fairness.portal.reports.usage_units import Day
from fairness.portal.signed_in import SignedInRequest

if TYPE_CHECKING:
    from django.contrib.auth import models as auth_models


class OwnRequest(SignedInRequest):
    auth: auth_models.User  # whom the key or session is


NOT_SIGNED_IN = "Sign in, or send one of your API keys as 'Authorization: Bearer gp-...'."


class OwnKey(HttpBearer):
    """One of the person's API keys, usable as /v1/ would find it (gateway/api_keys.check_usable)."""

    def __call__(self, request: HttpRequest) -> Any:
        header = request.headers.get("Authorization")
        if not header:
            return None  # the session may still say who it is
        return self.authenticate(request, parse_bearer(header))

    def authenticate(self, request: HttpRequest, token: str) -> auth_models.User:
        key = ApiKey.objects.select_related("owner").filter(secret_hash=hash_secret(token)).first()
        if key is None:
            raise ApiError(401, "Invalid API key.", "invalid_api_key")
        if key.revoked_at is not None:
            raise ApiError(401, "This API key has been revoked.", "revoked_api_key")
        if not key.owner.is_active:
            raise ApiError(401, "The owner of this API key has been deactivated.", "owner_inactive")
        if key.is_expired():
            raise ApiError(401, "This API key has expired.", "expired_api_key")
        request.user = key.owner
        return key.owner


class OwnSession(APIKeyCookie):
    """The signed-in person (CSRF is checked on anything but a read). Tried last: with neither a
    key nor a session the answer is /v1/'s 401, not ninja's."""

    param_name = "sessionid"

    def authenticate(self, request: HttpRequest, key: str | None) -> auth_models.User:
        user = getattr(request, "user", None)
        if user is None or not user.is_authenticated or not user.is_active:
            raise ApiError(401, NOT_SIGNED_IN, "missing_api_key")
        return user  # type: ignore[no-any-return]


router = Router(tags=["me"], auth=[OwnKey(), OwnSession()])


class MyWeightsOut(Schema):
    prompt: float
    cached_prompt: float
    completion: float
    sentence: str


class MyAccountOut(Schema):
    account: str
    is_default: bool = Field(description="Charged by your keys that name no account.")
    shares: int = Field(description="Your shares among the account's members.")
    norm_shares: float = Field(description="S: your share of the whole card, down the account tree.")
    account_shares: int
    account_norm_shares: float = Field(description="The account's share of the whole card.")
    usage: float = Field(description="Your decayed usage in this account, in weighted tokens.")
    account_usage: float = Field(description="The account's (and the accounts under it), in weighted tokens.")
    effective_usage: float = Field(description="U: your part of everyone's decayed usage.")
    fair_share: float = Field(description="F = 2^(-U/S): 1 having used nothing, 0.5 at exactly your share.")
    usage_over_share: float | None = Field(description="U / S; null with no share.")
    words: str
    budgets: list[BudgetOut] = Field(description="Your own budget in this account, and the account's and "
                                     "those of the accounts above it (shared with their members).")


class MyPriorityOut(Schema):
    key: str = Field(description="The key's prefix.")
    label: str
    tier: str
    account: str | None = Field(description="The account it charges; null: none.")
    age: float = Field(description="Seconds of rank from waiting: 0 now, one more every second it waits.")
    head_start: float = Field(description="Seconds of rank the tier gives every request of it.")
    fair_share_factor: float | None
    fair_share_weight: float = Field(description="The most rank, in seconds, the tier lets usage cost.")
    fair_share: float = Field(description="Seconds of rank your usage costs now: -(weight × (1 - F)).")
    priority: float = Field(description="age + head_start + fair_share: more goes first. Admission orders "
                            "waiting requests by arrival time minus this.")
    running: int = Field(description="Your requests running in this tier, all your keys of it together.")
    running_cap: int
    waiting: int
    words: str


class MyWaitingOut(Schema):
    id: str = Field(description="The request's id (its X-Request-Id).")
    model: str
    tier: str
    position: int = Field(description="How many of the requests waiting now go first.")
    waited: float = Field(description="Seconds since it arrived.")
    estimated_wait: float | None = Field(description="Seconds still to wait; null: over an hour.")
    age: float = Field(description="Seconds of rank from waiting (time held behind your own cap does not count).")
    head_start: float
    fair_share: float
    priority: float = Field(description="age + head_start + fair_share.")


class MyDayOut(Schema):
    day: dt.date
    requests: int
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int | None = Field(description="Of prompt_tokens, those the engine had cached; null: "
                                      "the day's request records are no longer kept.")
    weighted_tokens: float | None = Field(description="What budgets and fair share counted; null as above.")


class MyStandingOut(Schema):
    user: str
    half_life_hours: float = Field(description="Decayed usage halves in this time.")
    weights: MyWeightsOut
    accounts: list[MyAccountOut]
    key_budgets: list[BudgetOut] = Field(description="Budgets on your keys themselves.")
    priority: list[MyPriorityOut] = Field(description="For each of your live keys, the rank of a request "
                                        "sent now on it, part by part.")
    waiting: list[MyWaitingOut] = Field(description="Your requests waiting now, first first, each with the "
                                        "parts of its rank.")
    waiting_known: bool = Field(description="False: the queue could not be read (waiting is then empty).")
    days: list[MyDayOut] = Field(description="The last 30 days (UTC), oldest first, in both units.")
    total: MyDayOut = Field(description="The 30 days added up.")


def _account(a: AccountStanding) -> MyAccountOut:
    return MyAccountOut(
        account=a.account, is_default=a.is_default, shares=a.shares, norm_shares=a.norm_shares,
        account_shares=a.account_shares, account_norm_shares=a.account_norm_shares, usage=a.usage,
        account_usage=a.account_usage, effective_usage=a.effective_usage, fair_share=a.fair_share,
        usage_over_share=a.usage_over_share, words=a.sentence, budgets=[budget_out(line) for line in a.budgets],
    )


def _priority(p: Priority) -> MyPriorityOut:
    return MyPriorityOut(
        key=p.key, label=p.label, tier=p.tier, account=p.account, age=p.age, head_start=p.head_start,
        fair_share_factor=p.fair_share_factor, fair_share_weight=p.fair_share_weight, fair_share=p.fair_share,
        priority=p.priority, running=p.running, running_cap=p.running_cap, waiting=p.waiting, words=p.sentence,
    )


def _waiting(w: Waiting) -> MyWaitingOut:
    q = w.request
    return MyWaitingOut(id=q.request_id, model=w.model, tier=q.tier, position=q.position, waited=q.waited,
                        estimated_wait=q.eta, age=q.aged, head_start=q.head_start, fair_share=q.fair_share,
                        priority=q.rank)


def _day(d: Day) -> MyDayOut:
    return MyDayOut(day=d.day, requests=d.requests, prompt_tokens=d.prompt_tokens,
                  completion_tokens=d.completion_tokens, cached_tokens=d.cached_tokens,
                  weighted_tokens=d.weighted_tokens)


@router.get("/standing", response=MyStandingOut,
            summary="Your accounts, fair share, budgets, queue rank and usage per day (sshare -u me, sprio)")
def standing(request: OwnRequest) -> MyStandingOut:
    user = request.auth
    s = standing_for(user)
    w = s.weights
    return MyStandingOut(
        user=user.get_username(), half_life_hours=s.half_life_hours,
        weights=MyWeightsOut(prompt=w.prompt, cached_prompt=w.cached_prompt, completion=w.completion,
                           sentence=w.sentence),
        accounts=[_account(a) for a in s.accounts], key_budgets=[budget_out(line) for line in s.key_budgets],
        priority=[_priority(p) for p in s.priority],
        waiting=[_waiting(w) for w in s.waiting or []], waiting_known=s.waiting is not None,
        days=[_day(d) for d in s.days], total=_day(s.total),
    )
