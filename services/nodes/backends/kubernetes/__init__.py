"""The Kubernetes backend (docs/backends.md, Kubernetes): the node agent over a Kubernetes cluster's
nodes, each attempt a Pod Horizon binds to the node it chose. ``core.py`` is pure (Nodes and Pods in,
``NodeSpec``, Pod manifests and outcomes out); ``executor.py`` runs attempts as pods; ``backend.py``
keeps Horizon's nodes as the cluster's. Its API client is ``services/runtime/kubeapi.py``."""
