"""The ``horizon`` command: one click group (``main.py``) and a module per family of commands, each
with a ``register(group)`` listed in ``main.py``.

Commands reach a running cluster only as its users do: publishing inputs and asking the projections'
query API over NATS (``client.py``; submitting a job: ``submitter.py``). The shared options
(``--nats``, ``--tenant``, ``--admin``) and the console are ``options.py``. Part of the host layer: it
may import any service to run one (``horizon service``, ``horizon up``), never the other way round.
"""
