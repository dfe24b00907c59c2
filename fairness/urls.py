from django.urls import path

from fairness import metrics, proxy

urlpatterns = [
    path("v1/chat/completions", proxy.chat_completions, name="chat-completions"),
    path("v1/completions", proxy.completions, name="completions"),
    path("v1/models", proxy.models, name="models"),
    path("metrics", metrics.view, name="metrics"),
]
