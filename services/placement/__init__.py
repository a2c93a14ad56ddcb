"""The placement service: where each candidate of a scheduling cycle runs, and what waits.

``core.py`` is the pure core (state, evolve, decide); ``place.py`` places one job (best nodes, gangs
inside one interconnect domain, reasons per node group); ``backfill.py`` the backfill modes side by
side and the reservations; ``index.py`` groups nodes of one kind so each kind is judged once;
``part.py`` registers the service. Node fit itself (filters, scores, profiles) is shared and lives in
``services/domain/fit/``. Nothing here imports another service.
"""
