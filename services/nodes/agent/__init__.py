"""The node agent: registers its nodes, heartbeats, runs the jobs placed on them, and reports.

Unlike the five decision services (submission, scheduling, placement,
preemption, inventory) it decides nothing for the cluster: it carries out
what the log asks of its nodes and reports what happened (``JobStarted``,
``JobSucceeded``, ``JobFailed``, ``JobCancelled``, ``JobCheckpointed``,
``JobPreempted``). What lives here:

* ``core.py``: its pure core, ``AgentCore``: the fold of the log (which jobs
  are this agent's, the stop and preemption requests, the checkpoints, the
  endings it has reported) and the actions it calls for (``Action``: start,
  stop, preempt, resized, ended; at start-up, the plan ``resume``). No asyncio,
  no I/O, no clock;
* ``app.py``: the adapter, ``NodeAgent``: registration, heartbeats, following
  the log, and carrying out the core's actions through its ``Executor``
  (``services/nodes/backends/protocol.py``; the node model is
  ``services/nodes/spec.py``);
* ``steps.py``, ``step_door.py`` and ``step_runs.py``: job steps, ``srun``
  inside a job whose executor runs processes here: the socket a job's srun
  asks its agent on (the door), a step's tasks on the nodes this agent hosts,
  the other nodes' shares asked of their agents over NATS, and the reports
  ``JobStepStarted`` and ``JobStepEnded``;
* ``logs.py``, ``memory_pressure.py``, ``gpu_health.py``: serving the jobs'
  output to ``horizon logs``, the memory-pressure watch, the GPUs' health.

What must not: the agent imports only ``events``, ``services.domain`` and
``services.runtime``, never another service, and the decision services never
import the agent (they know a node only by its events). The host layer
(``services/front/``) composes it.
"""
