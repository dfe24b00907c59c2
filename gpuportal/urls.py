from django.contrib import admin
from django.urls import include, path

from fairness.api import api

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/", api.urls),
    path("", include("fairness.urls")),
]
