"""The local backend: one long-lived bubblewrap per sandbox with an exec server as PID 1.

``backend`` (:class:`LocalBackend`), ``sandbox`` (:class:`LocalSandbox`), the exec server
(``execserver.c``, ``execserver.py``) and the host's side of its protocol (``channel``,
``commands``), the sandbox's root (``rootfs``), the allowlist ``proxy`` and ``prefork``.
It builds on :mod:`sparring.sandbox.isolation` and :mod:`sparring.sandbox.storage`; nothing
below it imports it.
"""
