"""Budgets read back from admission's counters, rebuilt from the usage records after Redis lost
them, and their one-time notice at 80%."""

import asyncio
import datetime as dt
import threading

import pytest
import redis
from asgiref.sync import async_to_sync
from django.contrib.auth import get_user_model
from django.utils import timezone

from fairness.models import Account, ApiKey, Budget, Membership, UsageRecord
from fairness.telemetry import budget_status

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def nlp(cast) -> Account:
    account = Account.objects.create(name="nlp")
    for name in ("alice", "bob"):
        user = get_user_model().objects.get(username=name)
        user.email = f"{name}@lab.example"
        user.save()
        membership = Membership.objects.create(account=account, user=user)
        ApiKey.objects.filter(owner=user).update(membership=membership)
    return account


def record(member, prompt: int, completion: int, at: dt.datetime, n: list[int] = [0]) -> None:  # noqa: B006
    n[0] += 1
    UsageRecord.objects.create(key_id=member.key_id, request_id=f"req-{n[0]}", endpoint="chat", model="m",
                               status=200, prompt_tokens=prompt, completion_tokens=completion, created_at=at)


def test_counters_lost_with_redis_come_back_from_the_usage_records(redis_url, cast, nlp):
    now = timezone.now()
    budget = Budget.objects.create(account=nlp, tokens=10_000, period=Budget.Period.MONTH)
    key_budget = Budget.objects.create(key_id=cast["alice"].key_id, tokens=500, period=Budget.Period.ROLLING,
                                       window_hours=24)
    record(cast["alice"], 100, 50, now - dt.timedelta(hours=1))  # 200 weighted
    record(cast["bob"], 10, 20, now - dt.timedelta(minutes=1))  # 50
    record(cast["carol"], 1000, 1000, now)  # not in nlp
    record(cast["alice"], 100, 100, now - dt.timedelta(days=40))  # a month ago: outside both
    assert budget_status.restore_if_lost() is True
    assert budget_status.restore_if_lost() is False  # once
    month, rolling = budget_status.status_of([budget, key_budget])
    assert month.used == pytest.approx(250) and month.reserved == 0
    assert rolling.used == pytest.approx(200)
    assert month.left == pytest.approx(9750) and 0 <= month.elapsed <= 1
    redis.Redis.from_url(redis_url).flushdb()  # restarted empty
    assert budget_status.restore_if_lost() is True
    assert budget_status.status_of([budget])[0].used == pytest.approx(250)


def test_the_soft_limit_notice_goes_out_once_a_window(redis_url, cast, nlp, mailoutbox, settings):
    settings.GP_ALERT_WEBHOOK_URL = ""
    staff = get_user_model().objects.create(username="head", email="head@lab.example", is_staff=True)
    budget = Budget.objects.create(account=nlp, tokens=300, period=Budget.Period.MONTH)
    record(cast["alice"], 100, 50, timezone.now())  # 200 of 300: under 80%
    budget_status.restore_if_lost()
    assert asyncio.run(budget_status.send_notices()) == 0
    record(cast["bob"], 10, 20, timezone.now())  # 250 of 300
    redis.Redis.from_url(redis_url).flushdb()
    budget_status.restore_if_lost()
    assert asyncio.run(budget_status.send_notices()) == 1
    assert asyncio.run(budget_status.send_notices()) == 0  # once per window
    (mail,) = mailoutbox
    assert set(mail.to) == {"alice@lab.example", "bob@lab.example", staff.email}
    assert "account nlp has used 83%" in mail.subject
    assert "carol" not in " ".join(mail.to)
    budget.refresh_from_db()
    assert budget.noticed_period


def test_a_live_raise_replaces_the_standing_budget_until_its_date(cast, nlp):
    standing = Budget.objects.create(account=nlp, tokens=100, period=Budget.Period.MONTH)
    raised = Budget.objects.create(account=nlp, tokens=1000, period=Budget.Period.MONTH,
                                   until=timezone.now() + dt.timedelta(days=3))
    now = timezone.now().timestamp()
    assert budget_status.in_force([standing, raised], now) == [raised]
    assert budget_status.in_force([standing, raised], now + 4 * 86400) == [standing]


def test_a_raise_counts_what_its_holder_used_before_it_and_leaves_it_behind(redis_url, cast, nlp):
    standing = Budget.objects.create(account=nlp, tokens=300, period=Budget.Period.MONTH)
    record(cast["alice"], 100, 50, timezone.now())  # 200
    budget_status.restore_if_lost()
    raised = Budget.objects.create(account=nlp, tokens=1000, period=Budget.Period.MONTH,
                                   until=timezone.now() + dt.timedelta(days=2))
    (raise_status,) = budget_status.status_of([raised])
    assert raise_status.used == pytest.approx(200) and raise_status.left == pytest.approx(800)
    # One holder, one period, one count: what the raise lets through counts when it ends.
    (standing_status,) = budget_status.status_of([standing])
    assert standing_status.window.field == raise_status.window.field


def test_two_checks_at_once_send_the_soft_limit_notice_once(redis_url, cast, nlp, mailoutbox, settings,
                                                            monkeypatch):
    settings.GP_ALERT_WEBHOOK_URL = ""
    Budget.objects.create(account=nlp, tokens=300, period=Budget.Period.MONTH)
    record(cast["alice"], 200, 25, timezone.now())  # 250 of 300
    budget_status.restore_if_lost()
    # Both checks have found the budget due before either tells anyone, as two beats' runs may.
    both_looked = threading.Barrier(2)
    looked = budget_status.in_force

    def in_force_then_wait(*args):
        found = looked(*args)
        both_looked.wait(timeout=10)
        return found

    monkeypatch.setattr(budget_status, "in_force", in_force_then_wait)
    sent: list[int] = []
    # Each check's database work on its own thread, as on two workers (async_to_sync runs it there).
    checks = [threading.Thread(target=lambda: sent.append(async_to_sync(budget_status.send_notices)()))
              for _ in range(2)]
    for check in checks:
        check.start()
    for check in checks:
        check.join(timeout=30)

    assert sorted(sent) == [0, 1]
    assert len(mailoutbox) == 1
