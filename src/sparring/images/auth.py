"""Registry credentials, from where docker and podman keep them.

``$REGISTRY_AUTH_FILE`` (podman's), then ``$DOCKER_CONFIG/config.json`` (default ``~/.docker/config.json``),
then podman's ``${XDG_RUNTIME_DIR}/containers/auth.json``: the first ``auths`` entry for the registry
gives ``auth`` (base64 ``user:password``) or ``username`` and ``password``. Credential helpers are not
run: a login that lives only in a helper is not seen (log in with ``podman login`` to get a file entry).
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

from sparring.images.reference import DOCKER_HUB


def auth_files() -> list[Path]:
    out: list[Path] = []
    if os.environ.get("REGISTRY_AUTH_FILE"):
        out.append(Path(os.environ["REGISTRY_AUTH_FILE"]))
    docker = os.environ.get("DOCKER_CONFIG") or str(Path.home() / ".docker")
    out.append(Path(docker) / "config.json")
    if os.environ.get("XDG_RUNTIME_DIR"):
        out.append(Path(os.environ["XDG_RUNTIME_DIR"]) / "containers" / "auth.json")
    return out


def _keys(registry: str) -> list[str]:
    if registry == DOCKER_HUB:
        return ["https://index.docker.io/v1/", "index.docker.io", "docker.io", "registry-1.docker.io"]
    return [registry, f"https://{registry}", f"http://{registry}"]


def credentials_for(registry: str) -> str | None:
    """Base64 ``user:password`` for ``registry``, or None when no file has a login for it."""
    for path in auth_files():
        try:
            auths = json.loads(path.read_text()).get("auths") or {}
        except (OSError, ValueError, AttributeError):
            continue
        for key in _keys(registry):
            entry = auths.get(key) or auths.get(key.rstrip("/"))
            if not isinstance(entry, dict):
                continue
            if entry.get("auth"):
                return str(entry["auth"])
            if entry.get("username") and entry.get("password"):
                return base64.b64encode(f"{entry['username']}:{entry['password']}".encode()).decode()
    return None
