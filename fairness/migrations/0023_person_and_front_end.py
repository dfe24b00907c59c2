import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models
from django.db.models import OuterRef, Subquery


def asked_by_key_owner(apps, schema_editor):
    """Rows written before the person was recorded were all asked by their key's owner, and
    charged its association."""
    usage, keys = apps.get_model("fairness", "UsageRecord"), apps.get_model("fairness", "ApiKey")
    key = keys.objects.filter(pk=OuterRef("key_id"))
    usage.objects.filter(person__isnull=True).update(
        person_id=Subquery(key.values("owner_id")[:1]), membership_id=Subquery(key.values("membership_id")[:1]),
    )
    hourly = apps.get_model("fairness", "UsageHourly")
    hourly.objects.filter(person__isnull=True).update(person_id=Subquery(key.values("owner_id")[:1]))


class Migration(migrations.Migration):

    dependencies = [
        ('fairness', '0022_usage_count_source'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name='apikey',
            name='front_end',
            field=models.CharField(blank=True, choices=[('', 'None: the key speaks for its owner'), ('openwebui', 'Open WebUI')], help_text="Requests through it name the person asking (Open WebUI's forwarded user).", max_length=16),
        ),
        migrations.AddField(
            model_name='apikey',
            name='front_end_adds_people',
            field=models.BooleanField(default=True, help_text="A person the portal does not know yet is added on first sight, as a member of this key's account."),
        ),
        migrations.AddField(
            model_name='apikey',
            name='front_end_secret',
            field=models.TextField(blank=True, editable=False),
        ),
        migrations.AddField(
            model_name='apikey',
            name='front_end_trusts_plain_headers',
            field=models.BooleanField(default=False, help_text='Accept the unsigned X-OpenWebUI-User-* headers. Weaker: anyone holding the key can name any person.'),
        ),
        migrations.AddField(
            model_name='usagerecord',
            name='cached_tokens',
            field=models.PositiveIntegerField(default=0, help_text='Prompt tokens the engine found in its prefix cache (already in prompt_tokens).'),
        ),
        migrations.AddField(
            model_name='usagerecord',
            name='person',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='usage_asked', to=settings.AUTH_USER_MODEL),
        ),
        migrations.AddField(
            model_name='usagerecord',
            name='membership',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='usage', to='fairness.membership'),
        ),
        migrations.AddIndex(
            model_name='usagerecord',
            index=models.Index(fields=['person', 'created_at'], name='usage_person_time'),
        ),
        migrations.AddIndex(
            model_name='usagerecord',
            index=models.Index(fields=['membership', 'created_at'], name='usage_membership_time'),
        ),
        migrations.RemoveConstraint(
            model_name='usagehourly',
            name='one_row_per_key_hour',
        ),
        migrations.AddField(
            model_name='usagehourly',
            name='person',
            field=models.ForeignKey(null=True, on_delete=django.db.models.deletion.CASCADE, related_name='hourly_usage', to=settings.AUTH_USER_MODEL),
        ),
        migrations.RunPython(asked_by_key_owner, migrations.RunPython.noop),
        migrations.AddConstraint(
            model_name='usagehourly',
            constraint=models.UniqueConstraint(fields=('key', 'person', 'hour'), name='one_row_per_key_person_hour'),
        ),
    ]
