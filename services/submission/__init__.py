"""The submission service: admission of jobs and of requests about them (cancel, hold, release,
update), the only reader of the client input subjects.

``core.py`` is the pure core (fold and admit: ``JobAccepted``/``JobRejected``), with its state
(``state.py``), its checks against the log (``against_log.py``) and the answers to requests
(``requests.py``); ``normalise.py`` turns a ``JobSubmitted`` into a ``JobSpec`` or an actionable
reason (pure), judging against ``capacity.py`` what the registered nodes could ever hold (pure: a
job none of them could run is refused at once); ``validator_pool.py`` answers dry checks as a NATS
queue group (``horizon submit --check``); ``part.py`` registers the service. Fair-share and quota
rules it shares with scheduling come from ``services/domain/``; it imports no other service.
"""
