"""``manage.py tune MODEL VERSION --slo-p95-ms 50 [--rate 200]``: the tuner in the foreground."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from repository.errors import RegistryError
from repository.selectors import model_get, model_version_get
from repository.tuning.jobs import tuning_run
from repository.tuning.services import tuning_start
from repository.tuning.table import results_table


class Command(BaseCommand):
    help = (
        "Sweep batching off / low wait / high wait and instance counts for one version against "
        "an SLO, print the table and the recommendation (the same job the console runs)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("model")
        parser.add_argument("version", type=int)
        parser.add_argument(
            "--slo-p95-ms", type=float, help="p95 target (default: the model's SLO)"
        )
        parser.add_argument("--rate", type=float, help="expected arrival rate, req/s")
        parser.add_argument("--duration", type=float, default=2.0, help="seconds per measurement")
        parser.add_argument("--instances", type=int, nargs="+", help="instance counts to try")
        parser.add_argument("--batching", nargs="+", choices=("off", "low", "high"))
        parser.add_argument("--max-concurrency", type=int, default=16)
        parser.add_argument("--preferred-batch-sizes", type=int, nargs="+")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            version = model_version_get(
                model=model_get(name=options["model"]), number=options["version"]
            )
            p95 = options["slo_p95_ms"]
            job = tuning_start(
                version=version,
                actor=None,
                enqueue=False,
                slo=None if p95 is None else {"percentile": 95, "latency_ms": p95},
                rate_per_s=options["rate"],
                duration_s=options["duration"],
                batching=options["batching"],
                instances=options["instances"],
                preferred_batch_sizes=options["preferred_batch_sizes"],
                max_concurrency=options["max_concurrency"],
            )
        except RegistryError as exc:
            raise CommandError(exc.message) from exc
        self.stderr.write(f"tuning {job.pk}: {job.version} against {job.slo}")
        tuning_run(job_id=job.pk)
        job.refresh_from_db()
        if job.state != "succeeded":
            raise CommandError(f"tuning {job.pk} {job.state}: {job.error or job.message}")
        self.stdout.write(results_table(job.results, job.recommendation))
