"""The simulator: traces driven through the real services' cores at virtual time (``horizon simulate``).

Host code: it may import any layer; nothing outside the host imports it.
"""
