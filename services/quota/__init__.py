"""Quota providers: where accounts' limits come from.

Horizon's own (the local provider) is the operator: ``horizon account set`` publishes an
``AccountConfigured``. Another provider reads limits kept elsewhere and publishes the same event
when they change, so every limit is in the log and ``horizon audit`` replays the decisions it led
to. ``slurm``: Slurm's associations and QOS (``sacctmgr``), ``horizon quota sync --provider slurm``;
``kubernetes``: each namespace's ResourceQuotas as the account of its name, ``--provider kubernetes``.
docs/backends.md, "Quota providers", has the mappings.
"""
