"""Image references: ``[registry/]repository[:tag][@sha256:hex]``, as docker and podman read them.

A name whose first component has a dot or a port, or is ``localhost``, names its registry; any other
name lives on Docker Hub (``docker.io``, official images under ``library/``). Pure parsing, no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sparring.errors import ConfigError

DOCKER_HUB = "docker.io"
DOCKER_HUB_API = "registry-1.docker.io"
DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
_REPO_RE = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$")
_TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_HOST_RE = re.compile(r"^[A-Za-z0-9.-]+(?::[0-9]{1,5})?$|^\[[0-9a-fA-F:]+\](?::[0-9]{1,5})?$")


@dataclass(frozen=True)
class Reference:
    """A parsed image reference. ``tag`` is None when only a digest was given."""

    registry: str
    repository: str
    tag: str | None
    digest: str | None

    @property
    def api_host(self) -> str:
        """The host the distribution API is spoken to (Docker Hub's differs from its name)."""
        return DOCKER_HUB_API if self.registry == DOCKER_HUB else self.registry

    @property
    def name(self) -> str:
        """``registry/repository``, the part a tag or digest is attached to."""
        return f"{self.registry}/{self.repository}"

    @property
    def target(self) -> str:
        """What the manifest is fetched by: the digest when pinned, else the tag."""
        return self.digest or self.tag or "latest"

    def __str__(self) -> str:
        out = self.name
        if self.tag:
            out += f":{self.tag}"
        if self.digest:
            out += f"@{self.digest}"
        return out

    def with_digest(self, digest: str) -> Reference:
        return Reference(self.registry, self.repository, self.tag, digest)


def is_digest(text: str) -> bool:
    return bool(DIGEST_RE.match(text))


def parse(ref: str) -> Reference:
    """Parse ``ref``; a bad one is a one-line :class:`ConfigError` naming what is wrong."""
    text = ref.strip()
    if not text or any(c.isspace() for c in text):
        raise ConfigError(f"image reference {ref!r} is empty or has spaces: give e.g. debian:bookworm")
    digest: str | None = None
    if "@" in text:
        text, digest = text.split("@", 1)
        if not is_digest(digest):
            raise ConfigError(
                f"image reference {ref!r}: digest {digest!r} is not sha256: followed by 64 hex digits"
            )
    first, _, rest = text.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost" or first.startswith("[")):
        if not _HOST_RE.match(first):
            raise ConfigError(f"image reference {ref!r}: {first!r} is not a registry host[:port]")
        registry, path = first, rest
    else:
        registry, path = DOCKER_HUB, text
    tag: str | None = None
    last = path.rsplit("/", 1)[-1]
    if ":" in last:
        path, tag = path.rsplit(":", 1)
        if not _TAG_RE.match(tag):
            raise ConfigError(f"image reference {ref!r}: tag {tag!r} is not a valid tag")
    if registry == DOCKER_HUB and "/" not in path:
        path = f"library/{path}"
    if not _REPO_RE.match(path):
        raise ConfigError(
            f"image reference {ref!r}: repository {path!r} must be lowercase letters, digits and . _ - / separators"
        )
    if tag is None and digest is None:
        tag = "latest"
    return Reference(registry, path, tag, digest)


def is_loopback_host(host: str) -> bool:
    """Whether a registry ``host[:port]`` is this machine's loopback (the only place --insecure may reach)."""
    import ipaddress

    h = host
    if h.startswith("["):
        h = h[1 : h.index("]")]
    elif ":" in h:
        h = h.rsplit(":", 1)[0]
    if h == "localhost":
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False
