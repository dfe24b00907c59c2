"""A front end's JWT signing secret, sealed at rest with a key derived from SECRET_KEY.

Sealed by the portal when staff set it, unsealed by the gateway when it loads the key (this
module lives in the gateway's layer, which the portal's stands on). Sealed, not hashed: the
gateway checks each forwarded user's HMAC signature with the secret
itself, so it must be able to read it back. A database dump alone then gives nothing away; the
dump and SECRET_KEY together do, as they do for every session and signed value already.
"""

from __future__ import annotations

import base64
import functools

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings
from django.core.exceptions import ValidationError

__all__ = ["SecretUnreadable", "check_secret", "seal", "unseal"]

# HS256 wants a key at least as long as its hash (RFC 7518, 3.2).
MIN_SECRET_BYTES = 32
MAX_SECRET_CHARS = 4096
# Its own key, not SECRET_KEY itself: what is sealed here cannot be mistaken for, or turned into,
# a Django signature, and a new purpose later gets a new info string, not the same key: change it
# and every sealed secret goes unreadable.
_INFO = b"gpuportal front-end secret"


class SecretUnreadable(Exception):
    """Sealed under a SECRET_KEY this portal no longer has (nor lists in SECRET_KEY_FALLBACKS),
    or not a sealed value at all: set the front end's secret again."""


def check_secret(text: str) -> str:
    """The secret as it will be stored; raises ValidationError saying what is wrong with it.

    One trailing newline is dropped, as a file written by `echo` or an editor ends with one."""
    if text.endswith("\r\n"):
        text = text[:-2]
    elif text.endswith("\n"):
        text = text[:-1]
    if not text:
        raise ValidationError("The front end's JWT secret is empty.", code="empty")
    if text != text.strip():
        raise ValidationError("The front end's JWT secret starts or ends with whitespace; remove it "
                              "(the front end would sign with a different key).", code="whitespace")
    if "\x00" in text:
        raise ValidationError("The front end's JWT secret contains a NUL character.", code="nul")
    if len(text) > MAX_SECRET_CHARS:
        raise ValidationError(f"The front end's JWT secret is longer than {MAX_SECRET_CHARS} characters.",
                              code="long")
    if len(text.encode()) < MIN_SECRET_BYTES:
        raise ValidationError(f"The front end's JWT secret must be at least {MIN_SECRET_BYTES} bytes "
                              "(HS256 needs a key as long as its hash); generate one with "
                              "`openssl rand -hex 32`.", code="short")
    return text


def seal(secret: str) -> str:
    return _fernet(settings.SECRET_KEY, tuple(settings.SECRET_KEY_FALLBACKS)).encrypt(secret.encode()).decode()


def unseal(sealed: str) -> str:
    try:
        return _fernet(settings.SECRET_KEY, tuple(settings.SECRET_KEY_FALLBACKS)).decrypt(sealed.encode()).decode()
    except (InvalidToken, UnicodeError) as exc:
        raise SecretUnreadable("The front end's JWT secret was sealed under another SECRET_KEY; "
                               "set it again.") from exc


def _derived(secret_key: str) -> Fernet:
    # HKDF, not a slow password hash: SECRET_KEY is already long and random, and the gateway
    # unseals on every cold key load.
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_INFO).derive(secret_key.encode())
    return Fernet(base64.urlsafe_b64encode(key))


@functools.lru_cache(maxsize=8)  # keyed on the keys: a changed setting (a test's override) derives anew
def _fernet(secret_key: str, fallbacks: tuple[str, ...]) -> MultiFernet:
    # Seals with SECRET_KEY; also reads what older keys sealed, so rotating SECRET_KEY the Django
    # way (the old one into SECRET_KEY_FALLBACKS) keeps every front end working.
    return MultiFernet([_derived(secret_key), *(_derived(old) for old in fallbacks)])
