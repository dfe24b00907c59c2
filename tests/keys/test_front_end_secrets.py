"""A front end's JWT secret is sealed under SECRET_KEY: it reads back only where that key is known."""

from __future__ import annotations

import base64

import pytest
from cryptography.fernet import Fernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.core.exceptions import ValidationError
from django.test import override_settings

from fairness.gateway.front_end_secrets import SecretUnreadable, check_secret, seal, unseal

SECRET = "0123456789abcdef0123456789abcdef-openwebui"


def test_a_sealed_secret_reads_back_and_does_not_contain_the_secret():
    sealed = seal(SECRET)

    assert SECRET not in sealed and unseal(sealed) == SECRET
    assert seal(SECRET) != sealed  # a fresh nonce each time: equal secrets do not show as equal


def test_a_secret_sealed_under_another_secret_key_is_unreadable():
    with override_settings(SECRET_KEY="another portal's key, long enough to be a real one"):
        sealed = seal(SECRET)

    with pytest.raises(SecretUnreadable, match="another SECRET_KEY"):
        unseal(sealed)


def test_a_secret_sealed_before_the_secret_key_was_rotated_still_reads(settings):
    old = settings.SECRET_KEY
    sealed = seal(SECRET)

    with override_settings(SECRET_KEY="the new key, rotated in the Django way", SECRET_KEY_FALLBACKS=[old]):
        assert unseal(sealed) == SECRET


@pytest.mark.parametrize("sealed", ["", "not sealed at all", "gAAAAAB" + "A" * 100])
def test_anything_that_is_not_a_sealed_secret_is_unreadable(sealed):
    with pytest.raises(SecretUnreadable):
        unseal(sealed)


def test_the_gateway_can_unseal_with_the_key_derived_from_secret_key_alone(settings):
    # The gateway derives the same Fernet key on its own: HKDF-SHA256 of SECRET_KEY, this info.
    derived = HKDF(algorithm=hashes.SHA256(), length=32, salt=None,
                   info=b"gpuportal front-end secret").derive(settings.SECRET_KEY.encode())

    assert Fernet(base64.urlsafe_b64encode(derived)).decrypt(seal(SECRET).encode()).decode() == SECRET


def test_a_trailing_newline_from_a_file_is_dropped():
    assert check_secret(SECRET + "\n") == SECRET
    assert check_secret(SECRET + "\r\n") == SECRET


@pytest.mark.parametrize(("text", "why"), [
    ("", "empty"),
    ("\n", "empty"),
    ("x" * 31, "at least 32 bytes"),
    ("é" * 15, "at least 32 bytes"),  # 30 bytes of UTF-8
    (" " + SECRET, "whitespace"),
    (SECRET + " ", "whitespace"),
    (SECRET + "\n\n", "whitespace"),
    (SECRET + "\x00", "NUL"),
    ("x" * 4097, "longer than 4096"),
])
def test_a_secret_that_would_not_work_is_refused_with_the_reason(text, why):
    with pytest.raises(ValidationError, match=why):
        check_secret(text)


def test_thirty_two_bytes_are_enough():
    assert check_secret("x" * 32) == "x" * 32
    assert check_secret("é" * 16) == "é" * 16
