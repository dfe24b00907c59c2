"""Open WebUI's side of the contract, as open-webui 0.12.4 does it (open_webui/utils/headers.py):
the signed user token it forwards, and the plain headers it sends without a secret."""

from __future__ import annotations

import time
from dataclasses import dataclass
from urllib.parse import quote

import jwt

SECRET = "0123456789abcdef0123456789abcdef-open-webui-test"  # FORWARD_USER_INFO_HEADER_JWT_SECRET
EXPIRES_SECONDS = 300  # FORWARD_USER_INFO_HEADER_JWT_EXPIRES_SECONDS' default


@dataclass(frozen=True)
class OpenWebUIUser:
    id: str
    email: str
    name: str
    role: str = "user"


def mint_forward_user_jwt(user: OpenWebUIUser, secret: str = SECRET, now: float | None = None,
                          expires_seconds: int = EXPIRES_SECONDS, **changes: object) -> str:
    """_mint_forward_user_jwt: claims sub, email, name, role, iss, iat, exp; HS256."""
    issued = int(time.time() if now is None else now)
    payload: dict[str, object] = {
        "sub": str(user.id),
        "email": str(user.email),
        "name": str(user.name),
        "role": str(user.role),
        "iss": "open-webui",
        "iat": issued,
        "exp": issued + expires_seconds,
    }
    payload.update(changes)
    return jwt.encode(payload, secret, algorithm="HS256")


def jwt_headers(user: OpenWebUIUser, chat_id: str | None = None, **mint: object) -> dict[str, str]:
    headers = {"X-OpenWebUI-User-Jwt": mint_forward_user_jwt(user, **mint)}  # type: ignore[arg-type]
    if chat_id:
        headers["X-OpenWebUI-Chat-Id"] = chat_id
    return headers


def plain_headers(user: OpenWebUIUser) -> dict[str, str]:
    """include_user_info_headers without a secret."""
    return {
        "X-OpenWebUI-User-Name": quote(user.name.strip(), safe=" "),
        "X-OpenWebUI-User-Id": user.id,
        "X-OpenWebUI-User-Email": user.email.strip(),
        "X-OpenWebUI-User-Role": user.role,
    }
