import django.core.validators
from django.db import migrations, models

from fairness.demo.default_tiers import DEFAULT_TIERS


def bound_seeded_tiers(apps, schema_editor):
    # The seeded tiers get the bound they are now made with; tiers staff made keep none.
    Tier = apps.get_model("fairness", "Tier")
    for fields in DEFAULT_TIERS:
        if fields.get("max_queued"):
            Tier.objects.filter(name=fields["name"], max_queued=None).update(max_queued=fields["max_queued"])


class Migration(migrations.Migration):
    dependencies = [("fairness", "0019_storage_quota")]
    operations = [
        migrations.AddField(
            model_name="tier",
            name="max_queued",
            field=models.PositiveIntegerField(
                blank=True,
                null=True,
                validators=[django.core.validators.MinValueValidator(1)],
                help_text="Requests waiting across all keys of this tier; one more gets 429 at once. Empty "
                "for no tier bound (the gateway's GP_MAX_QUEUED_TOTAL still applies).",
            ),
        ),
        migrations.RunPython(bound_seeded_tiers, migrations.RunPython.noop),
    ]
