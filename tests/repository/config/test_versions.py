"""Version policies pick which version folders load."""

from __future__ import annotations

import pytest

from repository.config import ConfigError, parse_config_text, select_versions

pytestmark = pytest.mark.embedded


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        ("", [7]),
        ("version_policy { latest { num_versions: 2 } }", [3, 7]),
        ("version_policy { latest { num_versions: 10 } }", [1, 2, 3, 7]),
        ("version_policy { all { } }", [1, 2, 3, 7]),
        ("version_policy { specific { versions: [ 2, 7, 9 ] } }", [2, 7]),
    ],
)
def test_policy_selects_versions(policy: str, expected: list[int]) -> None:
    cfg = parse_config_text('name: "m" ' + policy)
    assert select_versions(cfg, [7, 1, 3, 2]) == expected


def test_latest_is_numeric_not_lexicographic() -> None:
    assert select_versions(parse_config_text('name: "m"'), [9, 10]) == [10]


@pytest.mark.parametrize("policy", ["", "version_policy { specific { versions: [ 5 ] } }"])
def test_no_selected_version_is_an_error(policy: str) -> None:
    cfg = parse_config_text('name: "m" ' + policy)
    with pytest.raises(ConfigError) as info:
        select_versions(cfg, [] if not policy else [1, 2])
    assert info.value.problems == [
        "version_policy: at least one version must be available under the version policy "
        "of model 'm'"
    ]
