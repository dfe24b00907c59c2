"""Usage reaches the database through a real Celery worker, not the request path."""

from fairness.models import UsageRecord
from tests.support.cast import MODEL
from tests.support.polling import wait_for


def test_a_real_worker_records_usage_of_proxied_requests(worker, cast, openai_for):
    client = openai_for(cast["alice"])
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": "hello"}], max_tokens=3,
        extra_body={"ignore_eos": True},
    )
    request_id = raw.headers["x-request-id"]
    record = wait_for(
        lambda: UsageRecord.objects.filter(request_id=request_id).first(),
        timeout=30, what=f"the worker to record {request_id}\n{worker.log_tail()}",
    )
    assert record.completion_tokens == 3
