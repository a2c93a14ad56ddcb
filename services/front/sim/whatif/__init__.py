"""``horizon whatif``: the live log's recent past replayed at virtual time, as configured and as changed.

Pure parts (no I/O): the log -> a workload (``workload.py``: ``workload_from_log``), the ``--set`` keys ->
operator configuration events (``changes.py``: ``parse_sets``, ``change_events``), node classes added or
removed (``parse_add_nodes``, ``remove_nodes``), a replay -> the numbers people decide on (``measures.py``:
``measure``), the baseline against what was recorded (``fidelity``) and two replays against each other
(``moves``); times and durations in ``times.py``. ``replay.py``'s ``run_whatif`` drives the simulator
(services/front/sim/driver.py) over the in-process bus, and ``report.py``'s ``whatif_report`` runs it
twice, as configured and as changed, and compares.

**The workload.** Every job submitted in the span (by event time) and accepted, plus the jobs submitted
before it that had not ended when it began ("carried in": replayed from their own submission, not
measured). A job rejected at submission was never demand on the cluster: it is left out (and counted,
``Workload.rejected``). An array's tasks are followed one by one, each with its own recorded run.
With a warm-up (``horizon whatif --warmup``, 7 days by default), the jobs submitted in the days
before the span are replayed too, as configured, so that the span begins with the queue, the
running jobs and the fair-share usage it had; they are not measured either.
Each is the recorded ``JobSubmitted`` as it was (tenant, account, resources, partitions, class,
dependencies, array), submitted at its recorded time, running for its recorded run time: from the
``JobScheduled`` of the attempt that completed (its allocation; the agent's ``JobStarted`` follows
within moments) to its end (a preempted attempt starts over, as the simulator's jobs do not
checkpoint); a first attempt the replay starts within the tolerance of its recorded start ends at
its recorded end, so the services' own reaction times do not drift the replay. An attempt placed
and failed before its agent started it (a command that could not start) held its nodes from its
placement to its failure, and so it does in the replay. A job that never
ran runs its time limit should it start; a job without an end in the log (still running, or the
log stops) runs its time limit; a job a user cancelled while it ran runs its time limit, and the
user's cancel is replayed at its time (started at its recorded start, it stops when its agent
reported it stopped). Every other input is replayed at its recorded time: the users' cancels,
holds, releases and updates, the operators' configuration and node commands (cordon, drain), the
agents' node registrations and inventory's observed node losses. Configuration from before the span
is applied at its start. Changes (``--set``, ``--config``, ``--add-nodes``, ``--remove-nodes``) are
applied at the span's start, after the configuration in force then.
"""

from services.front.sim.whatif.changes import (SET_KEYS, Changes, added_nodes, change_events, parse_add_nodes,
                                               parse_sets, remove_nodes)
from services.front.sim.whatif.measures import (AFTER_DIVERGENCE, BATCHED_ENDS, LATENCY, STALE_BASIS, capacity_of,
                                                fidelity, measure, moves)
from services.front.sim.whatif.replay import run_whatif, whatif_cores
from services.front.sim.whatif.report import whatif_report
from services.front.sim.whatif.times import DAY, WhatIfError, iso, parse_duration, parse_when
from services.front.sim.whatif.workload import RecordedJob, Workload, workload_from_log

__all__ = ["Workload", "RecordedJob", "WhatIfError", "workload_from_log", "parse_sets", "change_events", "Changes",
           "parse_add_nodes", "added_nodes", "remove_nodes", "measure", "fidelity", "moves", "capacity_of",
           "parse_when", "parse_duration", "iso", "DAY", "run_whatif", "SET_KEYS", "whatif_cores", "STALE_BASIS", "BATCHED_ENDS",
           "AFTER_DIVERGENCE", "LATENCY", "whatif_report"]
