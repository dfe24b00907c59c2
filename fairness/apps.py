from django.apps import AppConfig


class FairnessConfig(AppConfig):
    name = "fairness"
    verbose_name = "Fair sharing"

    def ready(self) -> None:
        from fairness import signals  # noqa: F401  (connects the receivers)
