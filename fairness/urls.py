from django.urls import path
from django.views.generic import RedirectView

from fairness import metrics, proxy, views

urlpatterns = [
    path("v1/chat/completions", proxy.chat_completions, name="chat-completions"),
    path("v1/completions", proxy.completions, name="completions"),
    path("v1/models", proxy.models, name="models"),
    path("", RedirectView.as_view(pattern_name="capacity"), name="home"),
    path("capacity/", views.capacity, name="capacity"),
    path("metrics", metrics.view, name="metrics"),
]
