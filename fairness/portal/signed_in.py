"""The requests of pages and endpoints behind a sign-in check, typed for mypy.

Django types `request.user` as the user or AnonymousUser; behind `login_required`,
`staff_required` or the admin API's authenticators it is always the user, and annotating such a
view's request says so once instead of narrowing in every view. The portal runs on Django's
stock user model (AUTH_USER_MODEL is not swapped), hence `User`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.http import HttpRequest

if TYPE_CHECKING:
    from django.contrib.auth.models import User


class SignedInRequest(HttpRequest):
    user: User


class AdminApiRequest(SignedInRequest):
    """django-ninja sets `auth` to what the authenticator returned: the admin API's user."""

    auth: User
