"""Ensembles checked against their composing models."""

from __future__ import annotations

from pathlib import Path

import pytest

from repository import demo_models as dm
from repository.config import (
    ConfigError,
    complete_config,
    ensemble_composition_problems,
    parse_config_text,
    scan_model_folder,
    validate_ensemble_composition,
)
from tests.repository.config.examples import ENSEMBLE_ADD_SUB, SIMPLE

pytestmark = pytest.mark.embedded


def test_demo_pipeline_matches_its_models(tmp_path: Path) -> None:
    configs = {}
    for model_dir in dm.write_demo_repository(tmp_path):
        folder = scan_model_folder(model_dir)
        configs[folder.name] = complete_config(
            folder.config_text, model_name=folder.name, version_dir=folder.versions[1]
        ).config
    validate_ensemble_composition(configs["pipeline"], configs)


def test_triton_ensemble_example_matches_simple() -> None:
    ensemble = parse_config_text(ENSEMBLE_ADD_SUB)
    assert ensemble_composition_problems(ensemble, {"simple": parse_config_text(SIMPLE)}) == []


def test_composition_problems_are_named() -> None:
    ensemble = parse_config_text(
        ENSEMBLE_ADD_SUB.replace("max_batch_size: 8", "max_batch_size: 16")
    )
    simple = parse_config_text(SIMPLE.replace('name: "OUTPUT1"', 'name: "OUT1"'))
    simple.input[1].data_type = simple.input[1].data_type + 1
    problems = ensemble_composition_problems(ensemble, {"simple": simple})
    assert (
        "max_batch_size: ensemble 'ensemble_add_sub' allows maximum batch size 16, but it contains "
        "model 'simple' which only allows maximum batch size to be 8"
    ) in problems
    assert (
        "ensemble_scheduling.step[0].output_map: model 'simple' has no tensor 'OUTPUT1'" in problems
    )
    assert (
        "ensemble_scheduling.step[0].input_map: tensor 'IN1' is TYPE_INT64 in model 'simple' "
        "but TYPE_INT32 in ensemble"
    ) in problems
    with pytest.raises(ConfigError):
        validate_ensemble_composition(ensemble, {})
    assert ensemble_composition_problems(ensemble, {}) == [
        "ensemble_scheduling.step[0].model_name: model 'simple' is not available",
        "ensemble_scheduling.step[1].model_name: model 'simple' is not available",
    ]
