"""The request log keeps a request's record GP_USAGE_RECORDS_DAYS days: the hourly prune_usage
task deletes what is older, and leaves the rest."""

from __future__ import annotations

import datetime as dt

import pytest
from django.conf import settings
from django.test import override_settings
from django.utils import timezone

from fairness.models import ApiKey, UsageRecord
from fairness.telemetry.tasks import prune_usage
from tests.support.usage_records import record

pytestmark = pytest.mark.django_db


@override_settings(GP_USAGE_RECORDS_DAYS=3.0)
def test_records_past_their_days_leave_the_log_and_the_rest_stay(cast):
    key = ApiKey.objects.get(pk=cast["alice"].key_id)
    now = timezone.now()
    gone = record(key, at=now - dt.timedelta(days=3, minutes=1))
    kept = record(key, at=now - dt.timedelta(days=2, hours=23))
    prune_usage()
    assert list(UsageRecord.objects.values_list("request_id", flat=True)) == [kept.request_id]
    assert not UsageRecord.objects.filter(request_id=gone.request_id).exists()


def test_beat_prunes_the_log_every_hour():
    assert settings.CELERY_BEAT_SCHEDULE["prune-usage"] == {"task": "fairness.prune_usage", "schedule": 3600.0}
    assert settings.GP_USAGE_RECORDS_DAYS == 30.0  # the default the docs state
