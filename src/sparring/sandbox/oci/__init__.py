"""The OCI backend: a sandbox is a podman container (runc) with its workspace mounted on the host.

``backend`` (:class:`OCIBackend`), ``sandbox`` (:class:`OCISandbox`), ``podman`` (its command lines),
``reset`` (the host's kill and birth-state check behind every reset), ``image`` (podman flags and the
local busybox image) and ``support`` (the exec server's scripts, cgroup chores, output collection); all
of it runs on the host (backend.py says more). It builds on
:mod:`sparring.sandbox.isolation` and :mod:`sparring.sandbox.storage`; nothing below it imports it.
"""
