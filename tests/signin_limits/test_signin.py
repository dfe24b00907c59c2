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
        wrong = Client(REMOTE_ADDR="127.10.0.1").post("/accounts/login/", {"username": "dora", "password": "x"})
        assert wrong.status_code == 200
    # From another address, even with the right password: the username is paused.
    locked = Client(REMOTE_ADDR="127.10.0.2").post("/accounts/login/",
                                                 {"username": "dora", "password": "correct horse battery"})
    assert locked.status_code == 429 and int(locked["Retry-After"]) > 0


def test_the_sign_in_form_needs_its_csrf_token():
    response = Client(enforce_csrf_checks=True).post("/accounts/login/", {"username": "a", "password": "b"})
    assert response.status_code == 403


def _sign_in(path: str, address: str, username: str, password: str):
    return Client(REMOTE_ADDR=address).post(path, {"username": username, "password": password})


def test_the_portal_and_admin_forms_share_one_limit(settings):
    settings.GP_SIGNIN_FAILURES_ALLOWED = 3
    get_user_model().objects.create_user("sam", password="a long staff password", is_staff=True)
    assert _sign_in("/accounts/login/", "127.10.0.1", "sam", "x").status_code == 200
    assert _sign_in("/admin/login/", "127.10.0.2", "sam", "x").status_code == 200
    assert _sign_in("/accounts/login/", "127.10.0.3", "sam", "x").status_code == 200
    # The admin's form is no way around the portal's count, nor the other way round.
    for path in ("/admin/login/", "/accounts/login/"):
        locked = _sign_in(path, "127.10.0.4", "sam", "a long staff password")
        assert locked.status_code == 429 and int(locked["Retry-After"]) > 0, path


def test_the_admin_form_signs_staff_in_and_keeps_researchers_out():
    get_user_model().objects.create_user("sam", password="a long staff password", is_staff=True)
    get_user_model().objects.create_user("dora", password="correct horse battery")
    assert Client().get("/admin/")["Location"] == "/admin/login/?next=/admin/"
    assert 'id="login-form"' in Client().get("/admin/login/?next=/admin/").content.decode()

    staff = Client()
    signed_in = staff.post("/admin/login/?next=/admin/", {"username": "sam", "password": "a long staff password",
                                                          "next": "/admin/"})
    assert signed_in.status_code == 302 and signed_in["Location"] == "/admin/"
    assert staff.get("/admin/").status_code == 200
    assert staff.get("/admin/login/")["Location"] == "/admin/"

    researcher = Client()
    refused = researcher.post("/admin/login/", {"username": "dora", "password": "correct horse battery"})
    assert refused.status_code == 200 and "_auth_user_id" not in researcher.session
    # A researcher signed in on the portal and sent to the admin sees its form, not a redirect loop.
    researcher.force_login(get_user_model().objects.get(username="dora"))
    assert researcher.get("/admin/login/?next=/admin/").status_code == 200


def test_look_alike_spellings_of_a_username_share_its_counter(settings):
    settings.GP_SIGNIN_FAILURES_ALLOWED = 3
    get_user_model().objects.create_user("alice", password="correct horse battery")
    # Django's form signs a look-alike in as alice (NFKC): so it must count as alice too.
    assert _sign_in("/accounts/login/", "127.10.0.1", "𝐚𝐥𝐢𝐜𝐞", "correct horse battery").status_code == 302
    for address, spelling in (("127.10.0.2", "𝐚𝐥𝐢𝐜𝐞"), ("127.10.0.3", "ａｌｉｃｅ"), ("127.10.0.4", "ALICE")):
        assert _sign_in("/accounts/login/", address, spelling, "x").status_code == 200
    assert _sign_in("/accounts/login/", "127.10.0.5", "alice", "correct horse battery").status_code == 429
    assert _sign_in("/accounts/login/", "127.10.0.6", "𝒶𝓁𝒾𝒸ℯ", "correct horse battery").status_code == 429


def test_a_success_restarts_the_username_count_and_does_not_count_against_the_address(settings):
    settings.GP_SIGNIN_FAILURES_ALLOWED = 3
    get_user_model().objects.create_user("dora", password="correct horse battery")
    for address in ("127.10.0.1", "127.10.0.2"):
        assert _sign_in("/accounts/login/", address, "dora", "x").status_code == 200
    assert _sign_in("/accounts/login/", "127.10.0.3", "dora", "correct horse battery").status_code == 302
    for address in ("127.10.0.4", "127.10.0.5", "127.10.0.6"):  # a fresh count of three
        assert _sign_in("/accounts/login/", address, "dora", "x").status_code == 200
    assert _sign_in("/accounts/login/", "127.10.0.7", "dora", "x").status_code == 429

    # Many people behind one address (a campus NAT) sign in all day without pausing it.
    get_user_model().objects.create_user("eve", password="another good password")
    for _ in range(5):
        assert _sign_in("/accounts/login/", "127.10.9.9", "eve", "another good password").status_code == 302
    assert _sign_in("/accounts/login/", "127.10.9.9", "eve", "x").status_code == 200
