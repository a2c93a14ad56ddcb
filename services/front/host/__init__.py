"""The host: what composes the services, on top of everything else.

Here: the in-process stack that
``horizon up`` and the end-to-end tests run (``stack.py``, composing the services the registry
lists: ``services/front/registry.py``), ``horizon up`` and ``horizon service`` themselves
(``launch.py``, ``launch_processes.py``, ``launch_service.py``, ``launch_web.py``), the supervisor of
``horizon up --processes`` (``supervisor.py``), the whole-log invariant
checker behind ``horizon check`` (``check.py``), and the secured embedded
server of ``horizon up --auth``/``--tls``: credentials and the generated
server configuration (``auth.py``), certificates (``tls.py``), putting them
together at start (``secure.py``), the running server's record in the data
dir (``running.py``), adding a tenant to it (``tenants.py``) and a login of a tenant or user
(``logins.py``), the read models rebuilt (``rebuild.py``) and the web dashboard (``dashboard.py``: its
charts ``dashboard_charts.py``, its operator pages ``dashboard_operator.py``, its setup
``dashboard_setup.py``). The host is a front room (``services/front/``): it may import any layer but the CLI; no service,
node, projection, runtime or domain module imports it, and only the CLI and the benches of the
other front rooms do.
"""
