"""The isolation parts every backend shares, and what the host offers of them.

``features`` (the one place each feature is detected, which ``sparring doctor`` reports),
``seccomp``, ``cgroups``, ``netns``, ``ipcns``, ``mounts``, host-side file operations
(``hostfiles``), checks and sweeps from the host (``init_state``, ``sweep``), the ``reaper``
and host ``tuning``. Nothing here imports a backend.
"""
