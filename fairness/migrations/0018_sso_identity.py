import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("fairness", "0017_isolate_prefix_cache_by_default"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="SsoIdentity",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("issuer", models.CharField(max_length=255)),
                ("subject", models.CharField(max_length=255)),
                ("made_user", models.BooleanField(default=False, help_text="Its first sign-in made the user (the provider then owns their e-mail address); otherwise a superuser linked an existing account to it.")),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                ("user", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="sso_identities", to=settings.AUTH_USER_MODEL)),
            ],
            options={
                "verbose_name": "SSO identity",
                "verbose_name_plural": "SSO identities",
                "ordering": ["issuer", "subject"],
                "constraints": [models.UniqueConstraint(fields=("issuer", "subject"), name="one_user_per_sso_identity")],
            },
        ),
    ]
