"""The front end's signed user token, checked against an injected clock: what names a person,
and every way a token is refused."""

from __future__ import annotations

import jwt
import pytest

from fairness.gateway.api_keys import FrontEnd
from fairness.gateway.errors import ApiError
from fairness.gateway.front_end_people import named_email
from tests.people.openwebui import SECRET, OpenWebUIUser, jwt_headers, mint_forward_user_jwt, plain_headers

NOW = 1_800_000_000.0
SIGNED = FrontEnd("openwebui", SECRET, trusts_plain_headers=False, adds_people=True, account_id=1)
PLAIN = FrontEnd("openwebui", "", trusts_plain_headers=True, adds_people=True, account_id=1)
ANNA = OpenWebUIUser("6c3f-anna", "Anna.Berg@Lab.Example", "Anna Berg")


def lower(headers: dict[str, str]) -> dict[str, str]:
    return {name.lower(): value for name, value in headers.items()}


def refusal(front_end: FrontEnd, headers: dict[str, str], now: float = NOW) -> ApiError:
    with pytest.raises(ApiError) as refused:
        named_email(front_end, lower(headers), now)
    return refused.value


def test_a_token_minted_as_open_webui_does_names_its_person_by_e_mail() -> None:
    assert named_email(SIGNED, lower(jwt_headers(ANNA, now=NOW)), NOW + 299) == ("anna.berg@lab.example", "Anna Berg")


@pytest.mark.parametrize(("why", "headers", "now", "code"), [
    ("no token", {}, NOW, "invalid_user_token"),
    ("expired", jwt_headers(ANNA, now=NOW - 301), NOW, "expired_user_token"),
    ("replayed at its expiry", jwt_headers(ANNA, now=NOW - 300), NOW, "expired_user_token"),
    ("forged", jwt_headers(ANNA, now=NOW, secret="another-secret-of-at-least-32-bytes!!"), NOW, "invalid_user_token"),
    ("another issuer", jwt_headers(ANNA, now=NOW, iss="someone-else"), NOW, "invalid_user_token"),
    ("issued in the future", jwt_headers(ANNA, now=NOW + 600), NOW, "invalid_user_token"),
    ("no e-mail", jwt_headers(OpenWebUIUser("x", "not-an-address", "X"), now=NOW), NOW, "invalid_user_token"),
    ("not a token", {"X-OpenWebUI-User-Jwt": "e30.e30.e30"}, NOW, "invalid_user_token"),
    ("plain headers on a key that does not trust them", plain_headers(ANNA), NOW, "invalid_user_token"),
])
def test_a_token_that_does_not_hold_is_refused_with_401(why, headers, now, code) -> None:
    refused = refusal(SIGNED, headers, now)
    assert (refused.status, refused.code) == (401, code), why


def test_an_unsigned_token_is_refused_even_with_the_right_claims() -> None:
    token = jwt.encode({"email": ANNA.email, "iss": "open-webui", "exp": NOW + 300}, key="", algorithm="none")
    assert refusal(SIGNED, {"X-OpenWebUI-User-Jwt": token}).status == 401


def test_a_token_without_exp_is_refused() -> None:
    token = jwt.encode({"email": ANNA.email, "iss": "open-webui"}, SECRET, algorithm="HS256")
    assert refusal(SIGNED, {"X-OpenWebUI-User-Jwt": token}).status == 401


def test_plain_headers_name_the_person_only_where_staff_trust_them() -> None:
    assert named_email(PLAIN, lower(plain_headers(ANNA)), NOW) == ("anna.berg@lab.example", "Anna Berg")
    # A token on a key with no secret cannot be checked: refused, not waved through.
    assert refusal(PLAIN, jwt_headers(ANNA, now=NOW)).status == 401


def test_the_name_header_is_read_as_open_webui_quotes_it() -> None:
    headers = plain_headers(OpenWebUIUser("1", "zoe@lab.example", "Zoë Ørsted"))
    assert named_email(PLAIN, lower(headers), NOW) == ("zoe@lab.example", "Zoë Ørsted")


def test_the_token_helper_matches_open_webuis_claims() -> None:
    claims = jwt.decode(mint_forward_user_jwt(ANNA, now=NOW), SECRET, algorithms=["HS256"],
                        options={"verify_exp": False, "verify_iat": False})
    assert claims == {"sub": "6c3f-anna", "email": ANNA.email, "name": "Anna Berg", "role": "user",
                      "iss": "open-webui", "iat": int(NOW), "exp": int(NOW) + 300}
