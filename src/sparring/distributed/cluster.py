"""Reaching a Ray cluster: the one given by address, or an embedded one started here."""

from __future__ import annotations

import logging
import os
import socket

from sparring.errors import ConfigError, one_line


def connect(address: str | None, capacity: int) -> bool:
    """Connect to ``address``, or start a one-node cluster on this machine whose node advertises
    ``capacity`` sandboxes. True when this call started Ray (the caller shuts it down)."""
    import ray

    from sparring.distributed.ray_runner import NODE_RESOURCE

    if ray.is_initialized():
        return False
    common = {"logging_level": logging.ERROR, "log_to_driver": False, "configure_logging": False}
    if address:
        _reachable(address)
        try:
            ray.init(address=address, **common)  # type: ignore[arg-type]
        except (ConnectionError, RuntimeError, ValueError) as e:
            raise ConfigError(f"cannot reach the Ray cluster at {address}: {one_line(e)}") from None
        return True
    # address="local": always a new instance of our own. With no address Ray joins whatever cluster
    # RAY_ADDRESS or /tmp/ray/ray_current_cluster names (another run's, another user's), and then
    # refuses num_cpus: a rollout with no address failed while another suite's cluster ran here.
    ray.init(
        address="local", num_cpus=max(2, os.cpu_count() or 1), resources={NODE_RESOURCE: capacity},
        include_dashboard=False, **common,  # type: ignore[arg-type]
    )  # fmt: skip
    return True


def _reachable(address: str, timeout_s: float = 5.0) -> None:
    """Refuse an address nothing listens on in seconds (Ray itself retries it for minutes)."""
    if address == "auto":
        return
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit():
        raise ConfigError(f"bad Ray address {address!r}: write HOST:PORT or ray://HOST:PORT")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as e:
        raise ConfigError(f"cannot reach the Ray cluster at {address}: {e.strerror or e}") from None
