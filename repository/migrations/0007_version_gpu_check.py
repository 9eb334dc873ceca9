"""A version's GPU check: pending when the validating worker had no usable GPU, then the outcome
the first GPU replica to load it reported. Existing versions need none."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("repository", "0006_version_code_uploaders_approved_code"),
    ]

    operations = [
        migrations.AddField(
            model_name="modelversion",
            name="gpu_check",
            field=models.CharField(
                blank=True,
                choices=[
                    ("", "not needed"),
                    ("pending", "pending"),
                    ("passed", "passed"),
                    ("failed", "failed"),
                ],
                default="",
                max_length=8,
            ),
        ),
        migrations.AddField(
            model_name="modelversion",
            name="gpu_check_message",
            field=models.TextField(blank=True, default=""),
        ),
        migrations.AddField(
            model_name="modelversion",
            name="gpu_checked_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="modelversion",
            name="gpu_checked_by",
            field=models.CharField(blank=True, default="", max_length=128),
        ),
        migrations.AddConstraint(
            model_name="modelversion",
            constraint=models.CheckConstraint(
                condition=models.Q(("gpu_check__in", ["", "pending", "passed", "failed"])),
                name="version_gpu_check_valid",
            ),
        ),
    ]
