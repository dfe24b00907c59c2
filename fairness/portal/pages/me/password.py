"""One's own account: changing one's password (Django's view, through the audited actions)."""

from __future__ import annotations

from django.contrib.auth import update_session_auth_hash
from django.contrib.auth import views as auth_views
from django.http import HttpResponse, HttpResponseRedirect
from django.urls import reverse_lazy

from fairness.actions.audit import Actor
from fairness.actions.users import change_own_password
from fairness.portal.client_address import client_address
from fairness.portal.forms import PasswordChangeForm


class PasswordChangeView(auth_views.PasswordChangeView):
    """Django's (sign-in required, the old password asked, sensitive fields kept out of error
    reports), with the change audited like every other."""

    form_class = PasswordChangeForm
    template_name = "registration/password_change_form.html"
    success_url = reverse_lazy("password-change-done")

    def form_valid(self, form: PasswordChangeForm) -> HttpResponse:
        user = self.request.user
        change_own_password(Actor(user, client_address(self.request)), user,  # type: ignore[arg-type]
                                    form.cleaned_data["new_password1"])
        update_session_auth_hash(self.request, user)  # type: ignore[arg-type]  # stay signed in here
        return HttpResponseRedirect(self.get_success_url())


class PasswordChangeDoneView(auth_views.PasswordChangeDoneView):
    template_name = "registration/password_change_done.html"
