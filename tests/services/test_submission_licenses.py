"""Submission and licenses (Slurm's -L): a job naming licenses the operator defined is accepted with
them; one naming a license not defined, more than the cluster has, or a malformed one is rejected,
naming the field and what to do. The configuration is applied exactly as the scheduler applies it."""

from __future__ import annotations

import pytest

from events import catalogue as c
from services.submission.core import SubmissionCore
from tests.helpers import Feed, node


def _feed() -> Feed:
    f = Feed(SubmissionCore())
    f.evt("agent", node("n1"))
    f.admin("license", c.LicenseConfigured(name="matlab", count=3))
    f.admin("license", c.LicenseConfigured(name="abaqus", count=1))
    return f


def _submit(job_id: str, licenses: dict[str, int]) -> c.JobSubmitted:
    return c.JobSubmitted(job_id=job_id, tenant="acme", command=["true"], licenses=licenses)


def test_a_job_naming_defined_licenses_is_accepted_with_them_sorted():
    f = _feed()
    f.input("acme", "submit", _submit("j1", {"matlab": 3, "abaqus": 1}))
    [verdict] = f.settle()
    assert isinstance(verdict, c.JobAccepted)
    assert list(verdict.spec.licenses.items()) == [("abaqus", 1), ("matlab", 3)]


@pytest.mark.parametrize("licenses, reason", [
    ({"ansys": 1}, "license 'ansys' is not defined (licenses here: abaqus, matlab)"),
    ({"matlab": 4}, "4 matlab licenses is more than the cluster's 3: the job could never start; ask for 3 or fewer"),
    ({"matlab": 0}, "matlab: 0 must be a count between 1 and 2147483647"),
    ({"mat lab": 1}, "'mat lab' is not a license name"),
])
def test_what_could_never_start_is_rejected_naming_the_field(licenses, reason):
    f = _feed()
    f.input("acme", "submit", _submit("j1", licenses))
    [verdict] = f.settle()
    assert isinstance(verdict, c.JobRejected) and verdict.field == "licenses"
    assert reason in verdict.reason


def test_the_configuration_is_applied_from_its_place_in_the_log_and_only_from_an_operator():
    f = Feed(SubmissionCore())
    f.evt("agent", node("n1"))
    f.input("acme", "submit", _submit("before", {"matlab": 1}))
    [rejected] = f.settle()
    assert isinstance(rejected, c.JobRejected) and "this cluster defines no licenses" in rejected.reason
    f.admin("license", c.LicenseConfigured(name="matlab", count=1))
    f.input("acme", "submit", _submit("after", {"matlab": 1}))
    [accepted] = f.settle()
    assert isinstance(accepted, c.JobAccepted)
    f.admin("license", c.LicenseConfigured(name="matlab", removed=True))
    f.admin("license", c.LicenseConfigured(name="abaqus", count=-2))  # refused by every fold: not applied
    f.input("acme", "submit", _submit("removed", {"matlab": 1}))
    [refused] = f.settle()
    assert isinstance(refused, c.JobRejected) and "defines no licenses" in refused.reason
