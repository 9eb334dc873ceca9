"""Tokens gain the invoker role, a model scope, inference quotas and an expiry.

Tokens that exist already expire 90 days after this migration runs (the default is evaluated
once for the existing rows), so nothing in use stops working at once.
"""

from django.db import migrations, models

import repository.models.tokens


class Migration(migrations.Migration):
    dependencies = [
        ("repository", "0007_version_gpu_check"),
    ]

    operations = [
        migrations.AddField(
            model_name="apitoken",
            name="expires_at",
            field=models.DateTimeField(default=repository.models.tokens.default_expiry),
        ),
        migrations.AddField(
            model_name="apitoken",
            name="max_concurrency",
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="apitoken",
            name="model_names",
            field=models.JSONField(blank=True, default=list),
        ),
        migrations.AddField(
            model_name="apitoken",
            name="rate_limit_rps",
            field=models.FloatField(blank=True, null=True),
        ),
        migrations.AlterField(
            model_name="apitoken",
            name="role",
            field=models.CharField(
                choices=[
                    ("viewer", "Viewer"),
                    ("deployer", "Deployer"),
                    ("admin", "Admin"),
                    ("invoker", "Invoker"),
                ],
                default="viewer",
                max_length=16,
            ),
        ),
    ]
