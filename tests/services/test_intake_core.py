"""The tenant boundary in the pure submission core: what the intake stores and how it is judged
(docs/tenants.md). The real server, accounts and the intake itself: tests/front/test_tenant_boundary.py."""

from __future__ import annotations

from events import catalogue as c
from events.codec import encode
from services.domain.protocol import Record
from services.runtime.replay import replay_decisions
from services.runtime.service import fold_record
from services.submission.core import SubmissionCore
from services.submission.intake_rules import screen
from tests.helpers import Feed, node


def submit(job_id: str, tenant: str = "acme", **kw) -> c.JobSubmitted:
    kw.setdefault("command", ["true"])
    return c.JobSubmitted(job_id=job_id, tenant=tenant, **kw)


class Intake(Feed):
    """A feed whose tenant inputs arrive as the intake stores them."""

    def raw(self, tenant: str, verb: str, data: bytes, headers: dict[str, str] | None = None,
            marks: dict[str, str] | None = None) -> int:
        """``marks``: headers the intake adds after screening (tests/services/test_tenant_limits.py's)."""
        # the server's own header names the sender: the tenant's login (tests of other users pass theirs)
        if headers is None:
            headers = {"Nats-Msg-Id": f"c{self.seq + 1}",
                       "Nats-Request-Info": f'{{"acc":"tenant-{tenant}","user":"{tenant}"}}'}
        stored, _ = screen(tenant, headers)
        stored.update(marks or {})
        self.seq += 1
        self.time += 1.0
        record = Record(self.seq, f"horizon.in.{tenant}.{verb}", data, self.time, stored)
        self.records.append(record)
        self.state, _, _ = fold_record(self.core, self.state, record)
        return self.seq

    def send(self, tenant: str, verb: str, event: c.Event, headers: dict[str, str] | None = None) -> int:
        return self.raw(tenant, verb, encode(event), headers)


def cluster() -> Intake:
    f = Intake(SubmissionCore())
    f.evt("agent", node("n1"))
    for uid, tenant in enumerate(("acme", "globex"), start=2001):  # each tenant's login and its Unix identity
        f.admin("user", c.UserConfigured(tenant=tenant, name=tenant, uid=uid, gid=uid))
    return f


def test_screen_namespaces_the_msg_id_and_refuses_server_headers():
    kept, refused = screen("acme", {"Nats-Msg-Id": "placement/PlacementCycleCompleted/6", "traceparent": "00-x",
                                    "X-Mine": "1"})
    assert kept == {"Horizon-Intake": "acme", "Horizon-User": "-", "Nats-Msg-Id": "in/acme/placement/PlacementCycleCompleted/6",
                    "Horizon-Client-Msg-Id": "placement/PlacementCycleCompleted/6", "traceparent": "00-x"}
    assert refused == []
    kept, refused = screen("acme", {"Nats-Batch-Id": "b", "Nats-Batch-Sequence": "1", "Nats-Rollup": "sub",
                                    "Nats-TTL": "1s", "Nats-Expected-Last-Subject-Sequence": "3",
                                    "Horizon-Intake": "globex"})
    assert refused == sorted(["Nats-Batch-Id", "Nats-Batch-Sequence", "Nats-Rollup", "Nats-TTL",
                              "Nats-Expected-Last-Subject-Sequence", "Horizon-Intake"])
    assert kept["Horizon-Intake"] == "acme" and not any(k.startswith("Nats-") for k in kept)


def test_two_tenants_may_use_one_job_id_and_each_sees_its_own():
    f = cluster()
    f.send("acme", "submit", submit("eval-7"))
    f.send("globex", "submit", submit("eval-7", tenant="globex"))
    out = f.settle()
    assert [(type(e).__name__, e.job_id, e.spec.tenant) for e in out] == [
        ("JobAccepted", "acme:eval-7", "acme"), ("JobAccepted", "globex:eval-7", "globex")]
    assert out[0].spec.name == "eval-7"  # shown by the id its tenant gave
    assert [e.spec.account for e in out] == ["acme", "globex"]  # naming no account: the tenant's own


def test_a_dependency_names_the_tenants_own_job_whether_or_not_another_tenant_has_one():
    f = cluster()
    f.send("globex", "submit", submit("g-1", tenant="globex"))
    f.settle()
    f.send("acme", "submit", submit("a-1", dependencies=[c.Dependency(job_id="g-1")]))
    f.send("acme", "submit", submit("a-2", dependencies=[c.Dependency(job_id="nobody")]))
    a1, a2 = f.settle()
    assert [d.job_id for d in a1.spec.dependencies] == ["acme:g-1"]  # not globex's g-1
    assert [d.job_id for d in a2.spec.dependencies] == ["acme:nobody"]


def test_requests_reach_only_the_tenants_own_jobs_and_answer_alike():
    f = cluster()
    f.send("globex", "submit", submit("g-1", tenant="globex"))
    f.settle()
    f.send("acme", "cancel", c.JobCancelRequested(job_id="g-1", tenant="acme"))
    f.send("acme", "cancel", c.JobCancelRequested(job_id="never", tenant="acme"))
    exists, missing = f.settle()
    assert isinstance(exists, c.RequestRejected) and isinstance(missing, c.RequestRejected)
    assert exists.reason.replace("g-1", "X") == missing.reason.replace("never", "X")
    assert f.state.jobs.get("globex:g-1").state.value == "PENDING"


def test_a_body_naming_another_tenant_is_answered_to_its_sender_only():
    f = cluster()
    f.send("acme", "submit", submit("x", tenant="globex"))
    [verdict] = f.settle()
    assert isinstance(verdict, c.JobRejected) and verdict.field == "tenant"
    assert verdict.tenant == "acme" and verdict.job_id == "acme:x"


def test_malformed_inputs_get_input_rejected_with_the_json_path():
    f = cluster()
    bad_type = f.raw("acme", "submit", b'{"type": "JobSubmitted", "v": 2, "job_id": "j", "tenant": "acme", '
                                       b'"resources": {"gpus": "two"}}', {"Nats-Msg-Id": "mine-1"})
    missing = f.raw("acme", "submit", b'{"type": "JobSubmitted", "v": 2, "tenant": "acme"}')
    not_json = f.raw("acme", "submit", b"{nope")
    wrong_verb = f.raw("acme", "explode", encode(submit("k")))
    headers = f.send("acme", "submit", submit("h"), {"Nats-Msg-Id": "h", "Nats-Rollup": "sub"})
    out = {e.input_seq: e for e in f.settle()}
    assert set(out) == {bad_type, missing, not_json, wrong_verb, headers}
    assert all(isinstance(e, c.InputRejected) and e.tenant == "acme" for e in out.values())
    assert all(e.causation_id == f"seq:{seq}" for seq, e in out.items())
    assert out[bad_type].path == "$.resources.gpus" and out[bad_type].msg_id == "mine-1"
    assert out[bad_type].job_id == "acme:j"
    assert "job_id" in out[missing].reason
    assert out[headers].path == "headers" and "Nats-Rollup" in out[headers].reason
    assert f.state.jobs.get("acme:h") is None  # refused, not run
    assert f.settle() == []
    assert replay_decisions(SubmissionCore(), f.records).mismatches == []


def test_an_account_open_to_a_tenant_refuses_the_others_naming_it():
    f = cluster()
    f.admin("account", c.AccountConfigured(account="globex", tenants=["globex"]))
    f.admin("account", c.AccountConfigured(account="globex-team", parent="globex"))
    f.send("acme", "submit", submit("a", account="globex", priority_class="normal"))
    f.send("acme", "submit", submit("b", account="globex-team"))
    f.send("globex", "submit", submit("g", tenant="globex", account="globex-team"))
    f.send("acme", "submit", submit("c", account="anything-else"))
    a, b, g, other = f.settle()
    assert isinstance(a, c.JobRejected) and a.field == "account" and "'globex'" in a.reason
    assert isinstance(b, c.JobRejected) and "'globex-team'" in b.reason
    assert isinstance(g, c.JobAccepted) and isinstance(other, c.JobAccepted)


def _info(tenant: str, login: str) -> dict[str, str]:
    return {"Nats-Msg-Id": f"m-{login}-{tenant}", "Nats-Request-Info": f'{{"acc":"tenant-{tenant}","user":"{login}"}}'}


def test_a_job_runs_as_the_user_the_server_authenticated():
    f = cluster()
    f.admin("user", c.UserConfigured(tenant="acme", name="alice", uid=3001, gid=3000, groups=[3000, 44],
                                     unix_user="alice"))
    f.send("acme", "submit", submit("a-1"), _info("acme", "acme.alice"))
    f.send("acme", "submit", submit("a-2"), {**_info("acme", "acme"), "Nats-Msg-Id": "m2"})
    by_id = {e.job_id: e for e in f.settle() if isinstance(e, c.JobAccepted)}
    alice, login = by_id["acme:a-1"].spec, by_id["acme:a-2"].spec
    assert (alice.user, alice.uid, alice.gid, alice.groups) == ("alice", 3001, 3000, (3000, 44))
    assert (login.user, login.uid) == ("acme", 2001)


def test_a_user_claimed_in_the_body_is_checked_against_the_authenticated_one():
    f = cluster()
    f.admin("user", c.UserConfigured(tenant="acme", name="alice", uid=3001, gid=3000))
    f.send("acme", "submit", submit("a-1", user="root"), _info("acme", "acme.alice"))
    f.send("acme", "submit", submit("a-2", user="alice"), {**_info("acme", "acme.alice"), "Nats-Msg-Id": "m2"})
    out = {e.job_id: e for e in f.settle() if isinstance(e, (c.JobAccepted, c.JobRejected))}
    refused = out["acme:a-1"]
    assert isinstance(refused, c.JobRejected) and refused.field == "user"
    assert "'root' is not who sent this: you are 'alice'" in refused.reason
    assert isinstance(out["acme:a-2"], c.JobAccepted) and out["acme:a-2"].spec.uid == 3001


def test_users_without_an_identity_root_and_unknown_senders_are_refused():
    f = cluster()
    f.admin("user", c.UserConfigured(tenant="acme", name="boss", uid=0, gid=0))
    f.admin("user", c.UserConfigured(tenant="acme", name="ops", uid=0, gid=0, allow_root=True))
    f.send("acme", "submit", submit("a-1"), _info("acme", "acme.carol"))  # a login with no UserConfigured
    f.send("acme", "submit", submit("a-2"), _info("acme", "acme.boss"))
    f.send("acme", "submit", submit("a-3"), _info("acme", "acme.ops"))
    f.send("acme", "submit", submit("a-4"), {"Nats-Msg-Id": "m4"})  # no server header: not through an import
    f.send("acme", "submit", submit("a-5"), {"Nats-Msg-Id": "m5", "Nats-Request-Info": '{"acc":"tenant-acme"}'})
    out = {e.job_id: e for e in f.settle() if isinstance(e, (c.JobAccepted, c.JobRejected))}
    assert "has no Unix identity" in out["acme:a-1"].reason and "horizon user add carol" in out["acme:a-1"].reason
    assert "uid 0 (root)" in out["acme:a-2"].reason
    assert isinstance(out["acme:a-3"], c.JobAccepted) and out["acme:a-3"].spec.uid == 0
    for key in ("acme:a-4", "acme:a-5"):
        assert isinstance(out[key], c.JobRejected) and "could not tell which user" in out[key].reason


def test_a_user_acts_on_its_own_jobs_and_the_tenants_login_on_all():
    f = cluster()
    for uid, name in ((3001, "alice"), (3002, "bob")):
        f.admin("user", c.UserConfigured(tenant="acme", name=name, uid=uid, gid=uid))
    f.send("acme", "submit", submit("a-1"), _info("acme", "acme.alice"))
    f.send("acme", "submit", submit("b-1"), _info("acme", "acme.bob"))
    f.settle()
    cancel = lambda job: c.JobCancelRequested(job_id=job, tenant="acme")  # noqa: E731
    f.send("acme", "cancel", cancel("a-1"), {**_info("acme", "acme.bob"), "Nats-Msg-Id": "c1"})
    f.send("acme", "cancel", cancel("b-1"), {**_info("acme", "acme.bob"), "Nats-Msg-Id": "c2"})
    f.send("acme", "cancel", cancel("a-1"), {**_info("acme", "acme"), "Nats-Msg-Id": "c3"})
    out = f.settle()
    refused = [e for e in out if isinstance(e, c.RequestRejected)]
    assert len(refused) == 1 and "is user 'alice''s: a user may cancel only its own jobs" in refused[0].reason
    assert {e.job_id for e in out if isinstance(e, c.JobCancelled)} == {"acme:a-1", "acme:b-1"}


def test_a_payload_nested_past_the_bound_is_refused_not_left_to_the_recursion_limit():
    f = cluster()
    deep: object = 1
    for _ in range(200):
        deep = [deep]
    f.send("acme", "submit", submit("p-1", payload=deep))
    f.send("acme", "submit", submit("p-2", payload={"a": [[{"b": 1}]]}))
    out = {e.job_id: e for e in f.settle() if isinstance(e, (c.JobAccepted, c.JobRejected))}
    assert isinstance(out["acme:p-1"], c.JobRejected) and out["acme:p-1"].field == "payload"
    assert "nested 200 deep; at most 64" in out["acme:p-1"].reason
    assert isinstance(out["acme:p-2"], c.JobAccepted)
