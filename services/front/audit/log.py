"""Reading the whole log for a replay (``read_log``), and telling a simulator's log from a live one."""

from __future__ import annotations

from collections.abc import Callable

from events.codec import DecodeError, decode
from events.subjects import STREAM
from services.domain.protocol import Record
from services.front.client.client import no_jetstream_text
from services.runtime.follow import read_through
from services.runtime.log import LogError

__all__ = ["read_log", "looks_simulated", "time_hint"]


async def read_log(url: str, on_batch: Callable[[int, int], None] | None = None) -> list[Record]:
    """Every record of the log, from seq 1; ``on_batch(records read, last seq)``. One-line errors
    (``LogError``) for an unreachable server, a missing stream, an empty or truncated log."""
    import nats.errors
    import nats.js.errors

    from services.runtime.jetstream import JetStreamLog, connect, redact_url

    nc = await connect(url, name="horizon-audit", connect_timeout_s=3.0, max_attempts=2)
    log = JetStreamLog(nc)
    where = redact_url(url)  # never a password in an error
    try:
        try:
            info = await log.js.stream_info(STREAM)
        except nats.js.errors.NotFoundError:
            raise LogError(f"there is no Horizon log at {where} (no stream {STREAM}): nothing to audit") from None
        except (nats.errors.TimeoutError, nats.errors.NoRespondersError) as exc:
            raise LogError(f"JetStream at {where} is not answering ({type(exc).__name__}): is -js enabled?") from None
        except nats.js.errors.ServiceUnavailableError as exc:
            raise LogError(no_jetstream_text(exc, "reading the whole log")) from None
        last, first = int(info.state.last_seq), int(info.state.first_seq)
        if last == 0 or int(info.state.messages) == 0:
            raise LogError(f"the log at {where} is empty: nothing to audit")
        if first > 1:
            raise LogError(f"the log at {where} begins at seq {first}: records 1..{first - 1} were removed, so no "
                           f"decision can be replayed from the start")
        out: list[Record] = []

        def keep(batch: list[Record]) -> None:
            out.extend(batch)
            if on_batch is not None:
                on_batch(len(out), last)

        await read_through(log, keep, until_seq=last)
        return out
    finally:
        await log.close()


def looks_simulated(records: list[Record]) -> bool:
    """Whether the log was written by the simulator (it registers the nodes as ``source: simulator``)."""
    for r in records[:500]:
        if b'"simulator"' in r.data:
            try:
                if decode(r.data).source == "simulator":
                    return True
            except DecodeError:
                continue
    return False


def time_hint(records: list[Record], virtual_time: bool) -> str | None:
    """What to say when the log and ``--virtual-time`` disagree (a simulator's log replayed at live
    time, or a live one at virtual time); None when they agree."""
    simulated = looks_simulated(records)
    if simulated and not virtual_time:
        return "this log was written by the simulator: audit it with --virtual-time"
    if virtual_time and not simulated:
        return "--virtual-time is for the simulator's logs; this one looks live"
    return None
