"""Which versions of a model the version policy selects."""

from __future__ import annotations

from collections.abc import Iterable

from tritonclient.grpc import model_config_pb2 as mc

from repository.config.errors import ConfigError


def select_versions(cfg: mc.ModelConfig, available: Iterable[int]) -> list[int]:
    """The versions to load, ascending: ``latest`` (default, 1), ``all`` or ``specific``.

    Listed ``specific`` versions that do not exist are skipped; selecting none is an error.
    """
    versions = sorted(set(available))
    policy = cfg.version_policy
    choice = policy.WhichOneof("policy_choice")
    if choice == "all":
        selected = versions
    elif choice == "specific":
        wanted = set(policy.specific.versions)
        selected = [v for v in versions if v in wanted]
    else:
        count = policy.latest.num_versions if choice == "latest" else 1
        selected = versions[-max(count, 1) :] if versions else []
    if not selected:
        raise ConfigError(
            [
                "version_policy: at least one version must be available under the version "
                f"policy of model '{cfg.name}'"
            ]
        )
    return selected
