"""The host: what composes the services, on top of everything else.

Here: the registry of decision services (``registry.py``, each as it
registered itself in ``services/<name>/part.py``), the in-process stack that
``horizon up`` and the end-to-end tests run (``stack.py``), the supervisor of
``horizon up --processes`` (``supervisor.py``), the whole-log invariant
checker behind ``horizon check`` (``check.py``), and the secured embedded
server of ``horizon up --auth``/``--tls``: credentials and the generated
server configuration (``auth.py``), certificates (``tls.py``), putting them
together at start (``secure.py``), the running server's record in the data
dir (``running.py``), adding a tenant to it (``tenants.py``) and a login of a tenant or user
(``logins.py``), the read models rebuilt (``rebuild.py``) and the web dashboard (``dashboard.py``: its
charts ``dashboard_charts.py``, its operator pages ``dashboard_operator.py``, its setup
``dashboard_setup.py``). The CLI, the benches and the simulator are host too (``services/front/cli``,
``services/front/bench``, ``services/front/sim``).

The host may import any layer; no service, projection, runtime or domain
module imports it.
"""
