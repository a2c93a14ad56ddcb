"""The top folder of Horizon's cgroups (services/nodes/backends/process/cgroups.py): ``horizon`` unless
``HORIZON_CGROUP_PARENT`` names another (each pytest-xdist worker of the suite has its own); the
attempt supervisor, a process of its own, gets it in the plan's hierarchy."""

from __future__ import annotations

import pytest

from services.nodes.backends.process.cgroups import Hierarchy, parent_folder, probe


def test_the_parent_is_horizon_unless_the_environment_names_another(monkeypatch):
    monkeypatch.delenv("HORIZON_CGROUP_PARENT", raising=False)
    assert parent_folder() == "horizon"
    monkeypatch.setenv("HORIZON_CGROUP_PARENT", "horizon-gw1")
    assert parent_folder() == "horizon-gw1"


@pytest.mark.parametrize("bad", ["a/b", "..", "../x", " x", ".hidden"])
def test_a_parent_that_is_not_one_folder_name_is_refused_by_name(monkeypatch, bad):
    monkeypatch.setenv("HORIZON_CGROUP_PARENT", bad)
    with pytest.raises(ValueError, match="HORIZON_CGROUP_PARENT must be one folder name"):
        parent_folder()


def test_the_parent_goes_into_the_path_and_through_the_plan(monkeypatch, tmp_path):
    memory = tmp_path / "memory"
    memory.mkdir()
    (memory / "cgroup.procs").write_text("")
    monkeypatch.setenv("HORIZON_CGROUP_PARENT", "hz-test")
    found = probe(tmp_path)
    assert (found.version, found.parent) == ("v1", "hz-test")
    assert found.cgroup("node-00", "j1", 2).paths() == {"memory": memory / "hz-test" / "node-00" / "j1.2"}
    again = Hierarchy.from_json(found.to_json())
    assert again == found
    old_plan = {k: v for k, v in found.to_json().items() if k != "parent"}  # a plan written before the parent
    assert Hierarchy.from_json(old_plan).cgroup("n", "j", 1).relative == "horizon/n/j.1"
