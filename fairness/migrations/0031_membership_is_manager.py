from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("fairness", "0030_key_limits"),
    ]

    operations = [
        migrations.AddField(
            model_name="membership",
            name="is_manager",
            field=models.BooleanField(
                default=False,
                help_text="Manages the account and the accounts under it: members, their keys, sub-accounts, "
                          "shares and budgets, within what staff gave the account (actions/lab_managers.py).",
            ),
        ),
    ]
