"""The services register what is special about them; shared code asks, never branches on a name."""

from __future__ import annotations

from events.subjects import DECISION_SERVICES
from services.domain.protocol import snapshot_interval
from services.front.registry import SERVICES, make_core
from services.runtime.parts import PartSettings
from services.runtime.replay import observations


def test_the_registry_holds_every_decision_service_once_in_start_order() -> None:
    assert tuple(SERVICES) == DECISION_SERVICES
    for name, part in SERVICES.items():
        assert part.name == name
        assert part.make_core(PartSettings()).name == name


def test_each_core_takes_its_own_settings() -> None:
    settings = PartSettings(policy="sjf", backfill="conservative")
    assert SERVICES["scheduling"].make_core(settings).policy == "sjf"
    assert SERVICES["placement"].make_core(settings).backfill == "conservative"
    assert make_core("scheduling", policy="fcfs").policy == "fcfs"
    assert make_core("placement", backfill="none").backfill == "none"
    assert snapshot_interval(make_core("scheduling")) > 0  # the scheduler snapshots; the others replay


def test_what_is_special_is_declared_by_the_core() -> None:
    cores = [make_core(name) for name in SERVICES]
    # only submission dead-letters undecodable client inputs
    assert [c.name for c in cores if getattr(c, "dead_letter_inputs", False)] == ["submission"]
    # only inventory records observations (basis 0) that an audit takes as inputs
    assert observations(cores) == {("inventory", "NodeLost"), ("inventory", "NodeReady")}


def test_an_unknown_service_is_a_clear_error() -> None:
    try:
        make_core("scheduler")
    except ValueError as exc:
        assert "unknown service 'scheduler'" in str(exc) and "scheduling" in str(exc)
    else:
        raise AssertionError("make_core accepted an unknown service")
