from django.db import migrations

from fairness.demo.default_tiers import DEFAULT_TIERS, ensure_default_tiers


def seed(apps, schema_editor):
    ensure_default_tiers(apps.get_model("fairness", "Tier"))


def unseed(apps, schema_editor):
    Tier = apps.get_model("fairness", "Tier")
    names = [t["name"] for t in DEFAULT_TIERS]
    Tier.objects.filter(name__in=names, api_keys__isnull=True).delete()


class Migration(migrations.Migration):
    dependencies = [("fairness", "0001_initial")]
    operations = [migrations.RunPython(seed, unseed)]
