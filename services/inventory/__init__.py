"""The inventory service: nodes, their health and commands, evictions, and the log's clock.

``core.py`` is its pure core; ``app.py`` runs it with the heartbeat watch and
the ticker beside it; ``part.py`` registers it with the host. Imports only
``events``, ``services.domain`` and ``services.runtime``, never another service.
"""
