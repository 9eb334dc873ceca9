"""``manage.py slo_alerts [--output deploy/alerts.yml]``: Prometheus alerting rules from SLOs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from repository.tuning.alerts import alert_rules_yaml
from repository.tuning.selectors import slo_list
from repository.tuning.services import slo_dict


class Command(BaseCommand):
    help = "Write Prometheus alerting rules (burning over 5 min, breached over 1 h) for every SLO."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--output", type=Path, help="file to write (default: standard output)")

    def handle(self, *args: Any, **options: Any) -> None:
        text = alert_rules_yaml({"model": s.model.name, **slo_dict(s)} for s in slo_list())
        if options["output"] is None:
            self.stdout.write(text, ending="")
            return
        options["output"].write_text(text, encoding="utf-8")
        self.stderr.write(f"wrote {options['output']}")
