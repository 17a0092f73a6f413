"""Handing an image of the store to podman (for the side-by-side benchmark on the same image).

The store's blobs are written out as an OCI layout (hard links, no copy) and ``podman pull oci:DIR``
loads it; the image is then named ``localhost/sparring-bench:<digest prefix>`` in podman's storage.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from sparring.errors import ImageError
from sparring.images.store import ImageRecord, ImageStore


def export_layout(store: ImageStore, rec: ImageRecord, dest: Path) -> None:
    """``rec`` as an OCI image layout at ``dest`` (a new directory), its blobs hard-linked from the store."""
    blobs = dest / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    manifest = store.read_blob(rec.digest)
    for d in (rec.digest, rec.config_digest, *(lay.digest for lay in rec.layers)):
        src, dst = store.blob_path(d), blobs / d.split(":", 1)[1]
        try:
            os.link(src, dst)
        except OSError:
            shutil.copyfile(src, dst)
    mt = json.loads(manifest).get("mediaType") or "application/vnd.oci.image.manifest.v1+json"
    index = {
        "schemaVersion": 2,
        "manifests": [{"mediaType": mt, "digest": rec.digest, "size": len(manifest)}],
    }
    (dest / "index.json").write_text(json.dumps(index))
    (dest / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')


def load_into_podman(ref: str, store: ImageStore | None = None) -> str:
    """Load the stored image ``ref`` into podman; returns the name podman knows it by."""
    podman = shutil.which("podman")
    if podman is None:
        raise ImageError(
            "podman is not installed: apt-get install podman (only the --podman comparison needs it)"
        )
    st = store or ImageStore()
    rec = st.require(ref)
    name = f"localhost/sparring-bench:{rec.digest.split(':', 1)[1][:16]}"
    if subprocess.run([podman, "image", "exists", name], capture_output=True).returncode == 0:
        return name
    with tempfile.TemporaryDirectory(dir=st.root / "tmp", prefix=f"{os.getpid()}-podman-") as tmp:
        export_layout(st, rec, Path(tmp) / "layout")
        r = subprocess.run([podman, "pull", "-q", f"oci:{tmp}/layout"], capture_output=True, text=True)
        if r.returncode != 0:
            raise ImageError(
                f"podman could not load image {ref}: {(r.stderr.strip().splitlines() or ['?'])[-1]}"
            )
        image_id = r.stdout.strip().splitlines()[-1]
        r = subprocess.run([podman, "tag", image_id, name], capture_output=True, text=True)
        if r.returncode != 0:
            raise ImageError(f"podman tag failed: {(r.stderr.strip().splitlines() or ['?'])[-1]}")
    return name
