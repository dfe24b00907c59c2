from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from fairness.portal.public_api import api
from fairness.portal.signin import AdminSignInView, SignInView

urlpatterns = [
    # Before the admin's own login: both forms share one limit on attempts (portal/signin.py).
    path("admin/login/", AdminSignInView.as_view(), name="admin-login"),
    path("admin/", admin.site.urls),
    path("api/", api.urls),
    path("accounts/login/", SignInView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", include("fairness.portal.urls")),
]
