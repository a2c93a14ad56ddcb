"""The ``horizon`` command: one click group (``main.py``) and a module per family of commands, each
with a ``register(group)`` listed in ``main.py``.

Commands reach a running cluster only as its users do: publishing inputs and asking the projections'
query API over NATS (``services/front/client/``: ``client.py``; submitting a job: ``submitter.py``).
The shared options (``--nats``, ``--tenant``, ``--admin``) and the console are ``options.py``. A command
parses its options, calls a library of a room of ``services/front/`` (the client, the audit, the
simulator, the host) and prints; nothing imports the CLI.
"""
