"""One UsageRecord per request id. Rows written twice before (two flushers racing past an expired
lock) are duplicates of the same event: the earliest is kept. The hourly rollup counted them
twice then; it is left as it is."""

from django.db import migrations, models
from django.db.models import Count, Min


def drop_duplicates(apps, schema_editor):
    UsageRecord = apps.get_model("fairness", "UsageRecord")
    repeated = (
        UsageRecord.objects.values("request_id")
        .annotate(copies=Count("id"), first=Min("id"))
        .filter(copies__gt=1)
        .order_by()
    )
    for group in repeated.iterator():
        UsageRecord.objects.filter(request_id=group["request_id"]).exclude(pk=group["first"]).delete()


class Migration(migrations.Migration):

    dependencies = [
        ("fairness", "0008_isolate_prefix_cache_and_replica_checks"),
    ]

    operations = [
        migrations.RunPython(drop_duplicates, migrations.RunPython.noop),
        migrations.AddConstraint(
            model_name="usagerecord",
            constraint=models.UniqueConstraint(fields=("request_id",), name="usage_one_row_per_request"),
        ),
    ]
