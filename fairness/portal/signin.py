"""Sign-in with a limit on failed attempts, per address and per username."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth import views as auth_views
from django.core.cache import cache
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render


def _buckets(request: HttpRequest) -> list[str]:
    username = (request.POST.get("username") or "").strip().lower()[:150]
    return [f"signin-fail:ip:{request.META.get('REMOTE_ADDR', '')}", f"signin-fail:user:{username}"]


class SignInView(auth_views.LoginView):
    template_name = "registration/login.html"
    redirect_authenticated_user = True

    def post(self, request: HttpRequest, *args, **kwargs) -> HttpResponse:
        limit = settings.GP_SIGNIN_FAILURES_ALLOWED
        if any((cache.get(bucket) or 0) >= limit for bucket in _buckets(request)):
            minutes = settings.GP_SIGNIN_LOCKOUT_SECONDS // 60
            response = render(request, "registration/too_many.html", {"minutes": minutes}, status=429)
            response["Retry-After"] = str(settings.GP_SIGNIN_LOCKOUT_SECONDS)
            return response
        return super().post(request, *args, **kwargs)

    def form_invalid(self, form):
        for bucket in _buckets(self.request):
            cache.add(bucket, 0, settings.GP_SIGNIN_LOCKOUT_SECONDS)
            cache.incr(bucket)
        return super().form_invalid(form)
