"""Fair share as of the ledger (services/domain/ledger.py): owners' entries folded give the owners' figures."""

from __future__ import annotations

import json
import math

import msgspec
import pytest

from events import catalogue as c
from services.domain.fairshare import FairShare, decayed
from services.domain.ledger import OwnUsage, UsageLedger

H = 7 * 86400.0  # the default half-life
LAM = math.log(2.0) / H


def entry(own: OwnUsage, n: int, now: float, basis: int) -> c.UsageCharged:
    return c.UsageCharged(entry=n, basis_seq=basis, as_of_ts=now, rows=own.rows(now, LAM))


def test_one_owner_8_gpus_for_a_half_life_is_5_771_h_and_the_ledger_extrapolates_its_running_rate():
    own, ledger = OwnUsage(), UsageLedger()
    own.start("acme/alice", 8.0, 0.0, seq=1, lam=LAM)
    e = entry(own, 1, H, basis=2)
    [row] = e.rows
    # 8 GPUs for one half-life H: 8*(1-1/2)*H/ln2 = 5.771*H GPU-seconds, still running at rate 8
    assert row.usage == pytest.approx(8 * 0.5 * H / math.log(2)) and row.usage / H == pytest.approx(5.771, abs=1e-3)
    assert row.rate == 8.0
    ledger.apply("scheduling-a", e)
    tree = ledger.tree
    leaf, account = tree.accounts["acme/alice"], tree.accounts["acme"]
    assert tree.usage_at(leaf, H) == pytest.approx(row.usage) and tree.usage_at(account, H) == pytest.approx(row.usage)
    # no entry since: the job is taken to run on at 8 GPUs (as of the ledger); exactly what the owner has
    assert tree.usage_at(leaf, 2 * H) == pytest.approx(decayed(row.usage, 8.0, H, LAM))
    own.stop("acme/alice", 8.0, 2 * H, seq=3, lam=LAM)
    own.published(e)
    assert list(own.changed) == ["acme/alice"]  # the stop came after the entry's basis
    e2 = entry(own, 2, 2 * H, basis=4)
    ledger.apply("scheduling-a", e2)
    assert leaf.rate == 0.0 and account.rate == 0.0 and leaf.running == 0
    # half of it is gone after another H without jobs
    assert tree.usage_at(leaf, 3 * H) == pytest.approx(e2.rows[0].usage / 2)


def test_two_owners_entries_sum_to_the_exact_tree_even_out_of_time_order():
    """Owner a's jobs and owner b's jobs of the same association, each owner publishing its own; b's entry
    as of t=100 lands after a's as of t=130. The folded tree equals one FairShare charging every job."""
    exact = FairShare()
    exact_leaf = exact.leaf_for(c.JobSpec(tenant="acme", account="acme", user="bob", gpus=1), 0.0).name
    ledger = UsageLedger()
    a_own, b_own = OwnUsage(), OwnUsage()
    exact.start(exact_leaf, 4.0, 10.0)
    a_own.start("acme/bob", 4.0, 10.0, seq=1, lam=LAM)
    exact.start(exact_leaf, 2.0, 20.0)
    b_own.start("acme/bob", 2.0, 20.0, seq=2, lam=LAM)
    exact.stop(exact_leaf, 4.0, 90.0)
    a_own.stop("acme/bob", 4.0, 90.0, seq=3, lam=LAM)
    ledger.apply("scheduling-a", entry(a_own, 1, 130.0, basis=4))
    ledger.apply("scheduling-b", entry(b_own, 1, 100.0, basis=5))
    for t in (130.0, 500.0, 86400.0):
        for name in ("acme/bob", "acme"):
            assert ledger.tree.usage_at(ledger.tree.accounts[name], t) == pytest.approx(
                exact.usage_at(exact.accounts[name], t), rel=1e-12)
    assert ledger.tree.accounts["acme/bob"].rate == pytest.approx(2.0)


def test_an_association_no_entry_names_ranks_as_a_newcomer_and_a_touched_one_counts_in_the_ranks():
    ledger = UsageLedger()
    ledger.apply("scheduling-a", c.UsageCharged(entry=1, basis_seq=1, as_of_ts=0.0,
                                                rows=[c.UsageRow(association="big/-", usage=1000.0)]))
    assert ledger.tree.factors(10.0) == {"big/-": 1.0}  # alone, it ranks first
    ledger.touch("small/-", 10.0)  # one of this leader's jobs waits under it
    assert ledger.tree.factors(10.0) == {"small/-": 1.0, "big/-": 0.5}


def test_configuration_is_mirrored_and_a_parent_the_fold_made_implicitly_is_made_too():
    ledger = UsageLedger()
    ledger.configure_account(c.AccountConfigured(account="team", parent="org", shares=3.0), 5.0)
    assert ledger.tree.accounts["team"].parent == "org" and ledger.tree.accounts["team"].shares == 3.0
    ledger.configure(c.FairShareConfigured(half_life_s=3600.0), 5.0)
    assert ledger.tree.half_life_s == 3600.0


def test_the_ledger_and_the_owners_side_survive_a_snapshot():
    own, ledger = OwnUsage(), UsageLedger()
    ledger.configure_account(c.AccountConfigured(account="acme", quota=c.Quota(gpus=4)), 0.0)
    own.start("acme/alice", 8.0, 0.0, seq=1, lam=LAM)
    own.touch("acme/bob", 1.0, seq=2)
    e = entry(own, 1, 50.0, basis=2)
    ledger.apply("scheduling-a", e)
    own.published(e)
    from services.domain.ledger import dump_own, load_own

    text = json.dumps({"ledger": ledger.dump(), "own": dump_own(own)}, default=msgspec.to_builtins)
    back = json.loads(text)
    again, own2 = UsageLedger.load(back["ledger"]), load_own(back["own"])
    assert again.tree.factors(99.0) == ledger.tree.factors(99.0)
    assert again.tree.accounts["acme"].quota == c.Quota(gpus=4) and again.last == ledger.last
    assert own2.leaves == own.leaves and own2.changed == {} and own2.entries == 1 and own2.last_ts == 50.0
    assert OwnUsage().due(0.0, 60.0) is False  # nothing changed: no entry
    assert own2.due(100.0, 60.0) is False and (own2.touch("x/-", 101.0, 9) or own2.due(110.0, 60.0))
