"""The account names every front end knows: Horizon's own users and the views a tenant may ask.

Owned by the client (it reads a NATS URL's user and explains a query nobody answers); the host builds
the server's accounts from the same names (services/front/host/auth.py), the dashboard and the
contract name the tenant's views with them.
"""

from __future__ import annotations

__all__ = ["HORIZON_ACCOUNT", "SERVICE_USERS", "HORIZON_USERS", "TENANT_VIEWS"]

HORIZON_ACCOUNT = "HORIZON"
# The query views a tenant may ask, about its own jobs (projections/job_server.py QueryServer).
TENANT_VIEWS = ("jobs", "job", "queue", "allocations")
SERVICE_USERS = ("submission", "scheduling", "placement", "preemption", "inventory")
# Every user of the HORIZON account: the operator, the five services, the agent, the projections.
HORIZON_USERS = ("admin", *SERVICE_USERS, "agent", "projections")
