"""``WorkerHeartbeat.kind``: notifiers beat too, beside run workers, and the health check and
the metrics tell the two apart. Existing rows are run workers' (nothing else beat before)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("portal", "0025_external_requests"),
    ]

    operations = [
        migrations.AddField(
            model_name="workerheartbeat",
            name="kind",
            field=models.CharField(
                choices=[("worker", "run worker"), ("notifier", "notifier")],
                default="worker",
                max_length=16,
            ),
        ),
    ]
