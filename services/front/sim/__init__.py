"""The simulator: traces driven through the real services' cores at virtual time (``horizon simulate``:
``simulation.py``), and the live log's recent past replayed as configured and as changed (``horizon whatif``:
``whatif/``).

Host code: it may import any layer; nothing outside the host imports it.
"""
