from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("fairness", "0020_tier_queue_bound")]
    operations = [
        migrations.AddField(
            model_name="usagerecord",
            name="prompt_count_source",
            field=models.CharField(
                blank=True,
                max_length=12,
                help_text="engine (its usage counts), tokenize (counted by the engine after the client left), "
                "estimate (body bytes at the measured bytes per token), prompt_ids; blank before it was recorded.",
            ),
        ),
        migrations.AddField(
            model_name="usagerecord",
            name="completion_count_source",
            field=models.CharField(
                blank=True,
                max_length=12,
                help_text="engine (its usage counts), events (content events relayed before the client left), "
                "unknown (a whole answer abandoned before it came: 0); blank before it was recorded.",
            ),
        ),
    ]
