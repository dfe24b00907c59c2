import pytest
from django.contrib.auth import get_user_model
from django.test import Client

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def clean_cache(redis_url):
    from django.core.cache import cache

    cache.clear()


def test_a_user_signs_in_with_the_right_password():
    get_user_model().objects.create_user("dora", password="correct horse battery")
    response = Client().post("/accounts/login/", {"username": "dora", "password": "correct horse battery"})
    assert response.status_code == 302


def test_failed_sign_ins_are_limited_per_username(settings):
    settings.GP_SIGNIN_FAILURES_ALLOWED = 3
    get_user_model().objects.create_user("dora", password="correct horse battery")
    for _ in range(3):
        wrong = Client(REMOTE_ADDR="10.0.0.1").post("/accounts/login/", {"username": "dora", "password": "x"})
        assert wrong.status_code == 200
    # From another address, even with the right password: the username is paused.
    locked = Client(REMOTE_ADDR="10.0.0.2").post("/accounts/login/",
                                                 {"username": "dora", "password": "correct horse battery"})
    assert locked.status_code == 429 and int(locked["Retry-After"]) > 0


def test_the_sign_in_form_needs_its_csrf_token():
    response = Client(enforce_csrf_checks=True).post("/accounts/login/", {"username": "a", "password": "b"})
    assert response.status_code == 403
