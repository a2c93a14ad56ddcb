"""The Slurm execution backend: Horizon decides, an existing Slurm cluster runs (docs/backends.md).

* ``core.py``: pure: Slurm's records (``scontrol show node|job -o``) as Horizon's nodes and outcomes,
  and a placement as its ``sbatch`` command line and batch script;
* ``executor.py``: the agent's ``Executor`` over Slurm: ``sbatch``, following the job
  (``scontrol show job``), ``scancel`` for cancels and preemptions, finding its jobs after a restart;
* ``backend.py``: ``SlurmBackend``, the node agent (``services/nodes/agent/app.py``) over a partition's
  nodes with that executor, keeping the nodes' capacity and drains as Slurm has them.
"""
