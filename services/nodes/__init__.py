"""The nodes: what runs jobs on machines, and says so in the log.

``spec.py``: a node's shape (``NodeSpec``) and the simulated development nodes (``local_nodes``).
``agent/``: the node agent, which registers its nodes, heartbeats, carries out what the log asks
of them and reports. ``backends/``: what the agent runs jobs through, behind one protocol
(``backends/protocol.py``): ``process/``, processes on this machine (cgroups, containers, CPU
pinning, GPU discovery), and ``slurm/``, a Slurm cluster's partition. ``job_environment.py``: the
environment a job's processes see.

The nodes import only ``events``, ``services.domain`` and ``services.runtime``, never a decision
service, a projection or a front end (tests/contract/test_walls.py).
"""
