"""Tolerations against taints, with Kubernetes' semantics (``Toleration.ToleratesTaint``), and the
``key=value:Effect`` syntax of ``horizon node taint``."""

from __future__ import annotations

import pytest

from events import catalogue as c
from services.domain.taints import TaintSyntaxError, check_taint, parse_taint, taint_text, tolerates, untolerated

BROKEN = c.Taint(key="gpu", value="broken", effect="NoExecute")
RESERVED = c.Taint(key="gpu", value="reserved", effect="NoSchedule")
BARE = c.Taint(key="maintenance", value="", effect="NoSchedule")


def tol(key: str = "", operator: str = "Equal", value: str = "", effect: str = "") -> c.Toleration:
    return c.Toleration(key=key, operator=operator, value=value, effect=effect)


# (toleration, taint, tolerated?, why)
TABLE = [
    (tol("gpu", "Equal", "broken", "NoExecute"), BROKEN, True, "key, value and effect all equal"),
    (tol("gpu", "Equal", "broken"), BROKEN, True, "empty effect matches every effect"),
    (tol("gpu", "Equal", "broken", "NoSchedule"), BROKEN, False, "another effect"),
    (tol("gpu", "Equal", "fine", "NoExecute"), BROKEN, False, "Equal with another value"),
    (tol("gpu", "Equal", "", "NoExecute"), BROKEN, False, "Equal with an empty value is not a wildcard"),
    (tol("gpu", "Exists", "", "NoExecute"), BROKEN, True, "Exists ignores the value"),
    (tol("gpu", "Exists", "whatever"), BROKEN, True, "Exists ignores even a value it was given"),
    (tol("cpu", "Exists"), BROKEN, False, "another key"),
    (tol("", "Exists"), BROKEN, True, "empty key with Exists tolerates everything"),
    (tol("", "Exists"), BARE, True, "... every key and effect"),
    (tol("", "Exists", effect="NoSchedule"), BROKEN, False, "empty key with Exists, limited to one effect"),
    (tol("", "Exists", effect="NoSchedule"), RESERVED, True, "... which it tolerates"),
    (tol("", "Equal", ""), BARE, True, "empty key with Equal: any key, the empty value (Kubernetes' function)"),
    (tol("", "Equal", ""), BROKEN, False, "... and no other value"),
    (tol("maintenance", "Equal"), BARE, True, "Equal with empty values on both sides"),
    (tol("maintenance", "", ""), BARE, True, "an empty operator means Equal"),
    (tol("gpu", "Like", "broken"), BROKEN, False, "an unknown operator matches nothing"),
    (tol("GPU", "Exists"), BROKEN, False, "keys are case-sensitive"),
    (tol("gpu", "Equal", "Broken"), BROKEN, False, "values are case-sensitive"),
]


@pytest.mark.parametrize(("toleration", "taint", "expected", "why"), TABLE, ids=[row[3] for row in TABLE])
def test_a_toleration_against_a_taint(toleration, taint, expected, why):
    assert tolerates([toleration], taint) is expected, why


def test_no_tolerations_tolerate_nothing_and_any_one_is_enough():
    assert not tolerates([], BARE)
    assert tolerates([tol("cpu", "Exists"), tol("gpu", "Equal", "broken")], BROKEN)


def test_untolerated_keeps_the_node_order_and_filters_by_effect():
    taints = [RESERVED, BROKEN, BARE, c.Taint(key="spot", effect="PreferNoSchedule")]
    assert untolerated([], taints) == taints
    assert untolerated([], taints, ("NoExecute",)) == [BROKEN]
    assert untolerated([], taints, ("NoSchedule", "NoExecute")) == [RESERVED, BROKEN, BARE]
    assert untolerated([tol("gpu", "Exists")], taints, ("NoSchedule", "NoExecute")) == [BARE]
    assert untolerated([tol("", "Exists")], taints) == []
    assert untolerated([tol("gpu", "Exists", effect="NoSchedule")], taints, ("NoExecute",)) == [BROKEN]


@pytest.mark.parametrize(("text", "taint"), [
    ("gpu=broken:NoExecute", BROKEN),
    ("maintenance:NoSchedule", BARE),
    ("maintenance=:NoSchedule", BARE),
    ("example.com/zone=eu-1:PreferNoSchedule", c.Taint(key="example.com/zone", value="eu-1", effect="PreferNoSchedule")),
])
def test_taint_syntax_round_trips(text, taint):
    assert parse_taint(text) == taint
    assert parse_taint(taint_text(taint)) == taint


@pytest.mark.parametrize(("text", "problem"), [
    ("gpu=broken", "write KEY=VALUE:EFFECT"),
    ("gpu=broken:NoRun", "taint effect 'NoRun' is not one of NoSchedule, PreferNoSchedule, NoExecute"),
    ("=broken:NoSchedule", "a taint needs a key"),
    ("gpu!=broken:NoSchedule", "taint key 'gpu!'"),
    ("gpu=bro ken:NoSchedule", "taint value 'bro ken'"),
    ("gpu=" + "x" * 64 + ":NoSchedule", "at most 63"),
])
def test_bad_taints_are_refused_with_the_rule(text, problem):
    with pytest.raises(TaintSyntaxError, match=problem.replace("(", r"\(")):
        parse_taint(text)


def test_untaint_may_leave_out_the_value_and_the_effect():
    assert parse_taint("gpu", effect_required=False) == c.Taint(key="gpu", value="", effect="")
    assert parse_taint("gpu:NoExecute", effect_required=False) == c.Taint(key="gpu", effect="NoExecute")
    assert check_taint(c.Taint(key="gpu", effect="")) != ""
    assert check_taint(c.Taint(key="gpu", effect=""), effect_required=False) == ""


def test_a_registration_s_own_taints_follow_it_and_an_operator_s_outlive_it() -> None:
    """A Kubernetes node registers with ``node.kubernetes.io/not-ready`` while its kubelet starts and
    again without it once Ready: placement must see it go. An operator's taint, set between the two,
    stays (as it does over an agent's restart)."""
    from services.domain.cluster import Cluster

    not_ready = c.Taint(key="node.kubernetes.io/not-ready", effect="NoExecute")
    gpu = c.Taint(key="nvidia.com/gpu", value="present", effect="NoSchedule")
    mine = c.Taint(key="maintenance", value="disk", effect="NoSchedule")

    def register(*taints: c.Taint) -> c.NodeRegistered:
        return c.NodeRegistered(node="n1", cpus_milli=1000, memory_bytes=1 << 30, taints=list(taints), backend="kubernetes")

    cluster = Cluster()
    cluster.apply(register(not_ready, gpu), 1)
    cluster.apply(c.NodeTaintsChanged(node="n1", taints=[not_ready, gpu, mine]), 2)
    cluster.apply(register(gpu), 3)
    assert cluster.nodes["n1"].taints == [gpu, mine]
    cluster.apply(register(gpu), 4)  # the same registration again changes nothing
    assert cluster.nodes["n1"].taints == [gpu, mine]
    cluster.apply(register(), 5)
    assert cluster.nodes["n1"].taints == [mine]
