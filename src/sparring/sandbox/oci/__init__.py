"""The OCI backend: a sandbox is a podman container (runc) with its workspace mounted on the host.

``backend`` (:class:`OCIBackend`), ``image`` (the podman command line and the local busybox image)
and ``support`` (the exec server script, cgroup chores, output collection). It builds on
:mod:`sparring.sandbox.isolation` and :mod:`sparring.sandbox.storage`; nothing below it imports it.
"""
