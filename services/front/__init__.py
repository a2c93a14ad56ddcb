"""The front ends: everything that reaches a running Horizon from outside, or runs one.

``registry.py``: the one list of the services, from which ``horizon up``, ``horizon service``, the
audit and the benches take them. ``client/``: publishing inputs and asking the projections'
queries. ``slurm/``: Slurm's face (``sbatch``, ``squeue``, ``sacct``). ``audit/``: the audit
(every decision replayed, its report). ``sim/``: the simulator and the what-if. ``bench/``: the
benchmarks. ``host/``: the in-process stack, the supervisor, the dashboard, auth and the whole-log
check. ``cli/``: the click wiring of the ``horizon`` command and the Slurm-named commands.

A front end may import any layer below (tests/contract/test_walls.py); nothing imports ``cli/``,
and no two of these folders import each other round a circle.
"""
