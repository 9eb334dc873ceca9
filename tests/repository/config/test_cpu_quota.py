"""The usable cores are the schedulable CPUs lowered to the cgroup's CPU quota, read from cgroup v2
(``cpu.max``) or v1 (``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``) at every level up to the root;
no quota, or nothing readable, leaves the schedulable CPUs. The trees are laid out as the kernel
lays them out, under a temporary folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from repository.config.cpu_quota import cgroup_cpu_quota, usable_cpu_count

SCHEDULABLE = len(os.sched_getaffinity(0))


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def proc_cgroup(tmp_path: Path, text: str) -> Path:
    write(tmp_path / "proc-self-cgroup", text)
    return tmp_path / "proc-self-cgroup"


def test_a_v2_pod_limit_of_one_and_a_half_cpus_gives_two_cores(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    write(root / "kubepods" / "pod1" / "cpu.max", "150000 100000\n")
    proc = proc_cgroup(tmp_path, "0::/kubepods/pod1\n")
    assert cgroup_cpu_quota(cgroup_root=root, proc_self=proc) == 1.5
    assert usable_cpu_count(cgroup_root=root, proc_self=proc) == min(SCHEDULABLE, 2)


def test_a_parents_limit_binds_an_unlimited_child(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    write(root / "kubepods" / "cpu.max", "50000 100000\n")
    write(root / "kubepods" / "pod1" / "cpu.max", "max 100000\n")
    proc = proc_cgroup(tmp_path, "0::/kubepods/pod1\n")
    assert cgroup_cpu_quota(cgroup_root=root, proc_self=proc) == 0.5
    assert usable_cpu_count(cgroup_root=root, proc_self=proc) == 1


def test_a_container_with_its_own_cgroup_namespace_reads_the_root(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    write(root / "cpu.max", "100000 100000\n")
    proc = proc_cgroup(tmp_path, "0::/\n")
    assert cgroup_cpu_quota(cgroup_root=root, proc_self=proc) == 1.0


def test_a_v1_quota_on_the_joint_cpu_cpuacct_mount(tmp_path: Path) -> None:
    mount = tmp_path / "cgroup" / "cpu,cpuacct"
    write(mount / "docker" / "abc" / "cpu.cfs_quota_us", "100000\n")
    write(mount / "docker" / "abc" / "cpu.cfs_period_us", "100000\n")
    proc = proc_cgroup(tmp_path, "4:cpu,cpuacct:/docker/abc\n0::/\n")
    assert cgroup_cpu_quota(cgroup_root=tmp_path / "cgroup", proc_self=proc) == 1.0
    assert usable_cpu_count(cgroup_root=tmp_path / "cgroup", proc_self=proc) == 1


@pytest.mark.parametrize(
    ("files", "proc"),
    [
        ({"cpu.max": "max 100000\n"}, "0::/\n"),  # v2, unlimited
        ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, "1:cpu:/\n"),
        ({"cpu.max": "garbage\n"}, "0::/\n"),  # unreadable
        ({}, "not a cgroup line\n"),
    ],
)
def test_no_quota_leaves_the_schedulable_cpus(
    tmp_path: Path, files: dict[str, str], proc: str
) -> None:
    root = tmp_path / "cgroup"
    root.mkdir()
    for name, text in files.items():
        write(root / name, text)
    path = proc_cgroup(tmp_path, proc)
    assert cgroup_cpu_quota(cgroup_root=root, proc_self=path) is None
    assert usable_cpu_count(cgroup_root=root, proc_self=path) == SCHEDULABLE


def test_a_missing_proc_file_leaves_the_schedulable_cpus(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    assert usable_cpu_count(cgroup_root=tmp_path, proc_self=missing) == SCHEDULABLE
