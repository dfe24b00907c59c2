"""What every page package shares: the staff gate, the actor a page's change is audited as, and
the one page that shows a secret with its answer to a form sent twice."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import TYPE_CHECKING, Any

from django.contrib import messages
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import redirect, render
from django.utils.cache import add_never_cache_headers
from django.views.decorators.debug import sensitive_variables

from fairness.actions.audit import Actor
from fairness.portal.client_address import client_address
from fairness.portal.signed_in import SignedInRequest

if TYPE_CHECKING:
    from django.contrib.auth.models import User


def staff_required(view: Callable[..., HttpResponseBase]) -> Callable[..., HttpResponseBase]:
    """Anonymous visitors go to sign in; signed-in non-staff get a plain 403 (not another
    sign-in form, which would suggest their account might work with a second try)."""

    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        if not request.user.is_authenticated:
            return redirect_to_login(request.get_full_path())
        if not (request.user.is_active and request.user.is_staff):
            raise PermissionDenied
        return view(request, *args, **kwargs)

    return wrapped


@sensitive_variables("context")
def secret_page(request: HttpRequest, template: str, **context: object) -> HttpResponse:
    """The one page that shows a secret: never cached by a browser or a proxy."""
    response = render(request, template, context)
    add_never_cache_headers(response)
    return response


def already_done(request: HttpRequest, made: str, what: str, lost_secret: str, listing: str) -> HttpResponse:
    """A form sent again (a reload of the secret page, a double click): nothing new is made."""
    if made:
        messages.info(request, f"That form was already sent and made {what} {made}…; nothing new was issued. "
                               f"Its secret was shown once: if it was not copied, {lost_secret}.")
    else:
        messages.info(request, "That form is already being handled; nothing new was issued.")
    return redirect(listing)


def page_actor(request: SignedInRequest) -> Actor:
    """Who a page's change is audited as: the signed-in user, from their address."""
    return Actor(request.user, client_address(request))


def staff_only(user: User) -> None:
    """Behind staff_required already; repeated by the helpers that fetch rows, so that each is safe
    wherever it is called."""
    if not (user.is_active and user.is_staff):
        raise Http404
