"""Guesses sent all at once get no more tries than guesses sent one by one.

A limit checked before an attempt and counted after it lets every attempt of a burst past the
check; counting first (atomically, in Redis) holds a burst to the limit.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.signals import user_login_failed
from django.contrib.staticfiles.handlers import StaticFilesHandler
from django.core.servers.basehttp import ThreadedWSGIServer
from django.test.testcases import LiveServerThread

from fairness.portal.signin.limits import count_attempt

pytestmark = pytest.mark.django_db(transaction=True)

BURST = 60
LIMIT = 5


@pytest.fixture(autouse=True)
def clean_cache(redis_url):
    from django.core.cache import cache

    cache.clear()


class _BurstServer(ThreadedWSGIServer):
    request_queue_size = BURST  # the whole burst connects at once (Django's server queues 10)


class _BurstServerThread(LiveServerThread):
    server_class = _BurstServer


@pytest.fixture
def threaded_server(transactional_db) -> Iterator[str]:
    """The portal in this process (so its authentications can be counted), a thread per request."""
    thread = _BurstServerThread("127.0.0.1", StaticFilesHandler)
    thread.daemon = True
    thread.start()
    thread.is_ready.wait()
    if thread.error:
        raise thread.error
    yield f"http://127.0.0.1:{thread.port}"
    thread.terminate()


def test_attempts_counted_at_once_let_exactly_the_limit_through(settings):
    settings.GP_SIGNIN_FAILURES_ALLOWED = LIMIT
    start = threading.Barrier(BURST)

    def attempt(_: int) -> bool:
        start.wait()
        return count_attempt("127.10.0.1", "dora").allowed

    with ThreadPoolExecutor(BURST) as pool:
        allowed = list(pool.map(attempt, range(BURST)))
    assert allowed.count(True) == LIMIT


def test_a_burst_of_wrong_passwords_reaches_the_password_check_at_most_the_limit(settings, threaded_server):
    settings.GP_SIGNIN_FAILURES_ALLOWED = LIMIT
    get_user_model().objects.create_user("dora", password="correct horse battery")
    url = threaded_server + "/accounts/login/"
    form = httpx.get(url)
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text).group(1)
    cookie = {"Cookie": f"csrftoken={form.cookies['csrftoken']}"}

    checked = []
    lock = threading.Lock()

    def count_check(sender, credentials, request=None, **kwargs) -> None:
        with lock:
            checked.append(credentials["username"])

    user_login_failed.connect(count_check)
    start = threading.Barrier(BURST)

    def guess(n: int) -> int:
        start.wait()
        data = {"username": "dora", "password": f"guess {n}", "csrfmiddlewaretoken": token}
        return httpx.post(url, data=data, headers=cookie, timeout=60).status_code

    try:
        with ThreadPoolExecutor(BURST) as pool:
            statuses = list(pool.map(guess, range(BURST)))
    finally:
        user_login_failed.disconnect(count_check)

    assert set(statuses) <= {200, 429}, statuses
    assert len(checked) == statuses.count(200) <= LIMIT
