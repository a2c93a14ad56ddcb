"""Benchmarks and failure drills (``horizon bench``, chaos, takeover, overload): host code.

They measure the real path (real nats-server, real services) and may import
any layer; nothing outside the host imports them. Figures go to docs/benchmarks.md
and docs/reliability.md with the exact command.
"""
