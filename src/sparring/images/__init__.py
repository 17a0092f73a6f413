"""Container images as sandbox roots: pull, import and build them into a content-addressed store.

* reference.py - parsing ``[registry/]name[:tag][@sha256:...]``
* registry.py / auth.py - the OCI distribution API client and its credentials
* archive.py - docker save, oci-archive and OCI layout imports; builder.py - buildah builds
* store.py - blobs, unpacked layers, flattened roots, records and tags, all made atomically
* unpack.py / flatten.py - layers made into a directory a hostile image cannot escape
* runtime.py - what a root needs to be a sandbox's ``/`` (mount points, the agent user)
"""

from sparring.images.reference import Reference, parse
from sparring.images.store import ImageRecord, ImageStore, default_root

__all__ = ["ImageRecord", "ImageStore", "Reference", "default_root", "parse"]
