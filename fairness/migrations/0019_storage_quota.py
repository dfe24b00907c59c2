import django.utils.timezone
from django.db import migrations, models
from django.db.models import OuterRef, Subquery


def results_belong_to_their_batchs_key(apps, schema_editor):
    """A batch's output and error files count as brought in by the key that ran it, so that key
    reads them (a key its owner did not make reaches only what it brought in); their last use is
    when they were made; a batch's input size is its file's, where the file is still there."""
    Batch = apps.get_model("fairness", "Batch")
    BatchFile = apps.get_model("fairness", "BatchFile")
    BatchFile.objects.update(last_used_at=models.F("created_at"))
    Batch.objects.filter(input_file__isnull=False).update(
        input_bytes=Subquery(BatchFile.objects.filter(pk=OuterRef("input_file_id")).values("bytes")[:1])
    )
    for field in ("output_file", "error_file"):
        BatchFile.objects.filter(purpose="batch_output", uploaded_with=None).update(
            uploaded_with_id=Subquery(Batch.objects.filter(**{field: OuterRef("pk")}).values("api_key_id")[:1])
        )


class Migration(migrations.Migration):
    dependencies = [("fairness", "0018_sso_identity")]

    operations = [
        migrations.AddField(
            model_name="batchfile",
            name="last_used_at",
            field=models.DateTimeField(
                default=django.utils.timezone.now,
                help_text="Uploaded, read, or a batch's input: kept GP_FILE_RETENTION_DAYS after this.",
            ),
        ),
        migrations.AddField(
            model_name="batchfile",
            name="state",
            field=models.CharField(
                choices=[("uploading", "Uploading"), ("stored", "Stored")], default="stored", max_length=12
            ),
        ),
        migrations.AddField(
            model_name="batch",
            name="input_bytes",
            field=models.PositiveBigIntegerField(
                default=0, help_text="Its input file's size: its lines count against its owner's quota until it ends."
            ),
        ),
        migrations.RunPython(results_belong_to_their_batchs_key, migrations.RunPython.noop),
    ]
