"""The node agent: registers its nodes, heartbeats, runs the jobs placed on them, and reports.

Unlike the five decision services (submission, scheduling, placement,
preemption, inventory) it decides nothing for the cluster: it carries out
what the log asks of its nodes and reports what happened (``JobStarted``,
``JobSucceeded``, ``JobFailed``, ``JobCancelled``, ``JobCheckpointed``,
``JobPreempted``). What lives here:

* ``core.py``: its pure core, ``AgentCore``: the fold of the log (which jobs
  are this agent's, the stop and preemption requests, the checkpoints, the
  endings it has reported) and the actions it calls for (``Action``: start,
  stop, preempt, ended; at start-up, the plan ``resume``). No asyncio, no I/O,
  no clock;
* ``nodes.py``: the node model, ``NodeSpec`` (its ``NodeRegistered`` event)
  and ``local_nodes``, pure; the simulator, the benchmarks and the CLI use it
  without starting an agent;
* ``app.py``: the adapter, ``NodeAgent``: registration, heartbeats, following
  the log, and carrying out the core's actions on processes;
* ``executors.py``: how a job runs: a real process group, or a simulated job
  that only takes time, and its checkpoints;
* ``steps.py`` and ``tasks.py``: job steps, ``srun`` inside a job: the socket
  a job's srun asks its agent on, a step's tasks on the nodes this agent hosts,
  the other nodes' shares asked of their agents over NATS, and the reports
  ``JobStepStarted`` and ``JobStepEnded``.

What must not: the agent imports only ``events``, ``services.domain`` and
``services.runtime``, never another service, and the decision services never
import the agent (they know a node only by its events). The host layer
(``services/{cli,host,bench,sim}/``) composes it.
"""
