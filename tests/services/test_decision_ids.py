"""Decision ids stay as the logs already written have them: ``<by>/<Type>/<key>/...``, now built by
``services/domain/envelope.py`` (a changed id would be a second decision on replay, not a duplicate).
The cores' ids are pinned by their replay tests; these are the producers outside a core's ``decide``."""

from __future__ import annotations

from types import SimpleNamespace

from events import catalogue as c
from events.subjects import parse_subject
from services.domain.config import config_rejected
from services.domain.protocol import Record
from services.inventory.app import HeartbeatWatch, Ticker
from services.submission.intake_rules import malformed_input


class _Log:
    def __init__(self) -> None:
        self.published: list[str] = []

    async def publish(self, subject: str, data: bytes, msg_id: str = "") -> None:
        self.published.append(msg_id)


async def test_the_clock_and_the_heartbeat_watch_name_their_observations_as_before():
    log = _Log()
    await Ticker(log, interval_s=5.0).tick(1_700_000_003.0)  # type: ignore[arg-type]
    assert log.published == ["clock/ClockTicked/340000000"]

    lost = SimpleNamespace(name="n1", removed=False, ready=True, lost=False, ready_seq=7, lost_seq=0)
    back = SimpleNamespace(name="n2", removed=False, ready=False, lost=True, ready_seq=3, lost_seq=9)
    runner = SimpleNamespace(state=SimpleNamespace(cluster=SimpleNamespace(sorted_nodes=lambda: [lost, back])),
                             log=log)
    watch = HeartbeatWatch(runner, nc=None, timeout_s=10.0)  # type: ignore[arg-type]
    watch.last_seen["n1"] = watch._started - 100.0  # silent for 100 s
    watch.last_seen["n2"] = watch._started + 1.0  # heard again after it was marked lost
    await watch.check(watch._started + 2.0)
    assert log.published[1:] == ["inventory/NodeLost/n1/7", "inventory/NodeReady/n2/back/9"]


def test_answers_to_inputs_and_configuration_keep_their_ids():
    subject = "horizon.in.acme.submit"
    record = Record(seq=12, subject=subject, data=b"{not json", time=1.0, headers={})
    rejected = malformed_input(record, parse_subject(subject), {}, "malformed")  # type: ignore[arg-type]
    assert rejected.id == "submission/InputRejected/12"
    assert (rejected.source, rejected.ts, rejected.causation_id) == ("submission", 0.0, "seq:12")
    [answer] = config_rejected("placement", {5: ("profile", "no such mode")}, 1.5, 6)
    assert isinstance(answer, c.ConfigRejected)
    assert (answer.id, answer.correlation_id, answer.causation_id, answer.source, answer.basis_seq) == (
        "placement/ConfigRejected/5", "seq-5", "seq:5", "placement", 6)
