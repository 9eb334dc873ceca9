"""The GPU part of a version's check, run by the first GPU replica that loads it.

A version validated without a usable GPU is "GPU check pending" in the registry. A replica that
places it on a GPU runs its warm-up (the server always does) and then its golden requests on one
instance per GPU, before the version takes traffic; a failure keeps the version UNAVAILABLE on
this replica. The outcome travels back in the heartbeat (serving's only write), where the registry
records it on the version.
"""

from __future__ import annotations

from typing import Any

from tritonclient.grpc import model_config_pb2 as mc

from serving.backends.base import ModelInstance
from serving.core.model_spec import ModelSpec
from serving.errors import UnavailableError

GpuReports = dict[tuple[str, int], dict[str, Any]]


class GpuCheckGate:
    """A ``VersionPlan.gate``: golden requests on the GPU instances, the outcome in ``reports``."""

    def __init__(self, golden: tuple[dict[str, Any], ...], reports: GpuReports) -> None:
        self.golden = golden
        self.reports = reports

    def __call__(self, spec: ModelSpec, instances: list[ModelInstance]) -> None:
        from serving.check_io import replay_golden

        per_device = {i.placement.device_id: i for i in instances if i.placement.kind == "KIND_GPU"}
        failures = [
            f"GPU {device}: golden request {result['id']}: {result['message']}"
            for device, instance in sorted(per_device.items())
            for result in (replay_golden(e, spec=spec, instance=instance) for e in self.golden)
            if not result["ok"]
        ]
        devices = ", ".join(str(d) for d in sorted(per_device))
        if failures:
            message = "GPU check failed: " + "; ".join(failures)
            self.reports[(spec.name, spec.version)] = {"ok": False, "message": message}
            raise UnavailableError(f"model '{spec.name}' version {spec.version}: {message}")
        self.reports[(spec.name, spec.version)] = {
            "ok": True,
            "message": f"warm-up and {len(self.golden)} golden request(s) passed on GPU {devices}",
        }


def placed_on_gpu(config: mc.ModelConfig) -> bool:
    """Whether this replica resolved any instance group of ``config`` to a GPU."""
    return any(g.kind == mc.ModelInstanceGroup.KIND_GPU for g in config.instance_group)


def report_failed_load(reports: GpuReports, row: dict[str, Any]) -> None:
    """A pending version that did not even load or warm up on this GPU replica failed its check."""
    key = (str(row["model"]), int(row["version"]))
    if key not in reports and row.get("state") == "UNAVAILABLE" and row.get("reason"):
        reports[key] = {"ok": False, "message": f"GPU check failed: {row['reason']}"}
