"""Parsing and printing config.pbtxt and the config JSON."""

from __future__ import annotations

import pytest

from repository.config import (
    ConfigError,
    config_problems,
    config_to_json,
    config_to_text,
    parse_config_json,
    parse_config_text,
)
from tests.repository.config.examples import ALL_EXAMPLES, DYNAMIC_BATCHING, SIMPLE_DYNA_SEQUENCE

pytestmark = pytest.mark.embedded


@pytest.mark.parametrize("name", sorted(ALL_EXAMPLES))
def test_triton_example_configs_round_trip_and_are_valid(name: str) -> None:
    cfg = parse_config_text(ALL_EXAMPLES[name])
    assert cfg.name == name
    again = parse_config_text(config_to_text(cfg))
    assert again == cfg
    assert config_problems(cfg) == []


@pytest.mark.parametrize("name", sorted(ALL_EXAMPLES))
def test_json_round_trips(name: str) -> None:
    cfg = parse_config_text(ALL_EXAMPLES[name])
    assert parse_config_json(config_to_json(cfg)) == cfg


def test_unknown_field_is_a_parse_error_naming_the_field() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config_text('name: "m"\nmax_batch_size: 1\nbogus_field: 3\n')
    (problem,) = info.value.problems
    assert problem.startswith("config.pbtxt: failed to read text proto")
    assert "bogus_field" in problem and "3:1" in problem


def test_syntax_error_and_bad_enum_are_parse_errors() -> None:
    with pytest.raises(ConfigError, match="failed to read text proto"):
        parse_config_text('name: "m" input { name: "x" ')
    with pytest.raises(ConfigError, match="TYPE_FLOAT"):
        parse_config_text('input { name: "x" data_type: TYPE_FLOAT dims: 1 }')


def test_json_prints_int64_as_numbers_and_includes_defaults() -> None:
    data = config_to_json(parse_config_text(DYNAMIC_BATCHING))
    assert data["input"][0]["dims"] == [-1]
    assert data["version_policy"] == {"specific": {"versions": [1, 3]}}
    assert data["dynamic_batching"]["max_queue_delay_microseconds"] == 100
    policy = data["dynamic_batching"]["default_queue_policy"]
    assert policy["default_timeout_microseconds"] == 5000
    assert policy["max_queue_size"] == 16
    assert data["dynamic_batching"]["priority_queue_policy"]["2"]["timeout_action"] == "DELAY"
    assert data["model_warmup"][0]["inputs"]["INPUT0"]["dims"] == [4]
    assert data["platform"] == "" and data["input"][0]["optional"] is False


def test_json_sequence_fields_are_numbers() -> None:
    data = config_to_json(parse_config_text(SIMPLE_DYNA_SEQUENCE))
    seq = data["sequence_batching"]
    assert seq["max_sequence_idle_microseconds"] == 10_000_000
    assert seq["oldest"]["max_queue_delay_microseconds"] == 10_000
    assert data["parameters"]["execute_delay_ms"] == {"string_value": "3"}


def test_parse_config_json_accepts_string_and_rejects_unknown_fields() -> None:
    cfg = parse_config_json('{"name": "m", "max_batch_size": 2, "input": [{"dims": ["4", 5]}]}')
    assert list(cfg.input[0].dims) == [4, 5]
    with pytest.raises(ConfigError, match="failed to parse JSON"):
        parse_config_json('{"name": "m", "nope": 1}')
    with pytest.raises(ConfigError, match="failed to parse JSON"):
        parse_config_json("{not json")
