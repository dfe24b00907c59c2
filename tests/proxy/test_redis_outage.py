"""Redis going away mid-service: clients get a clear 503, and the gateway recovers on its own."""

from fairness.models import Replica
from tests.support.cast import MODEL
from tests.support.polling import wait_for
from tests.support.processes import start_gateway
from tests.support.redis_server import PrivateRedis
from tests.support.v1_calls import CHAT, assert_error, post


def test_a_redis_outage_gets_503_and_service_resumes_when_redis_is_back(live_db_url, tiers, cast, sim):
    Replica.objects.create(name="sim-a", base_url=sim.url, model=MODEL, max_num_seqs=8)
    store = PrivateRedis().start()
    gateway = start_gateway(live_db_url, name="outage", REDIS_URL=store.url(), CELERY_BROKER_URL=store.url())
    secret = cast["alice"].secret
    try:
        assert post(gateway, secret, CHAT).status_code == 200  # leases and accounting on the lane

        store.stop()
        error = assert_error(post(gateway, secret, CHAT), 503, "store_unavailable")
        assert "try again" in error["message"]

        store.start()  # empty: no scripts, no capacity, no config epoch

        def served() -> dict | None:
            response = post(gateway, secret, CHAT)
            return response.json() if response.status_code == 200 else None

        answer = wait_for(served, timeout=20, what="the gateway to serve again once Redis is back")
        assert answer["choices"][0]["message"]["content"]
    finally:
        gateway.stop()
        store.stop()
