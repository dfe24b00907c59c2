from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from fairness.portal.api.public import api
from fairness.portal.signin.limits import AdminSignInView, SignInView
from fairness.portal.signin.oidc_views import SsoCallback, SsoStart

urlpatterns = [
    # Before the admin's own login: both forms share one limit on attempts (portal/signin/limits.py).
    path("admin/login/", AdminSignInView.as_view(), name="admin-login"),
    path("admin/", admin.site.urls),
    path("api/", api.urls),
    path("accounts/login/", SignInView.as_view(), name="login"),
    # SSO (fairness/portal/signin/oidc_views.py); 404 while GP_OIDC_ISSUER is unset. The names are the
    # library's, which reverses the callback's to build the redirect URI.
    path("oidc/authenticate/", SsoStart.as_view(), name="oidc_authentication_init"),
    path("oidc/callback/", SsoCallback.as_view(), name="oidc_authentication_callback"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", include("fairness.portal.urls")),
]
