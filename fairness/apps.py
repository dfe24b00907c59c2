from django.apps import AppConfig


class FairnessConfig(AppConfig):
    name = "fairness"
    verbose_name = "Fair sharing"

    def ready(self) -> None:
        # The receivers and the Django admin's registrations live with the portal.
        from fairness.portal import django_admin, signals  # noqa: F401
