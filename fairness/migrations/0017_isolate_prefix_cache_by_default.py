from django.db import migrations, models

from fairness.demo.default_tiers import DEFAULT_TIERS


def isolate_seeded_tiers(apps, schema_editor):
    # The seeded tiers were made before isolation was the default; tiers staff made keep theirs.
    Tier = apps.get_model("fairness", "Tier")
    Tier.objects.filter(name__in=[t["name"] for t in DEFAULT_TIERS]).update(isolate_prefix_cache=True)


class Migration(migrations.Migration):
    dependencies = [("fairness", "0016_self_service_help")]
    operations = [
        migrations.AlterField(
            model_name="tier",
            name="isolate_prefix_cache",
            field=models.BooleanField(
                default=True,
                help_text="Cached prompt prefixes are reused only within one user's requests (vLLM's "
                "cache_salt), so no user can time another's prompts. The cost: a system prompt the "
                "users share is prefilled once per user, not once; with 8 users sharing a 2,000-token "
                "one, each one's first answer started 0.8 s later, their later turns hit their own "
                "cache (bench/isolation.py). Turn off only for users who trust each other.",
            ),
        ),
        migrations.RunPython(isolate_seeded_tiers, migrations.RunPython.noop),
    ]
