"""A policy as something a node can rebuild: its spec, its settings and the weights version.

Nodes call the inference servers themselves (``openai:URL#MODEL``: straight to
vLLM / SGLang, never through the driver). A local transformers policy being
trained in the driver is exported once per weights version to a directory the
nodes read (the weight sync of a Ray run), and rebuilt there as ``hf:DIR``.
Scripted policies are rebuilt by name; any other policy of plain data (a
family's noisy demonstrator) is sent by value once.
"""

from __future__ import annotations

import hashlib
import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparring.errors import ConfigError
from sparring.policy.base import Policy
from sparring.policy.spec import make_policy

_SCRIPTED = ("oracle", "random", "adversarial")
_OPENAI_SETTINGS = ("timeout_s", "max_retries", "backoff_s", "temperature", "max_tokens", "token_ids")
_HF_SETTINGS = ("max_new_tokens", "temperature", "top_p", "seed", "max_prompt_tokens")


@dataclass(frozen=True)
class PolicyRef:
    spec: str
    version: int = 0
    kwargs: dict[str, Any] = field(default_factory=dict)
    pickled: bytes | None = None
    """Any other small, self-contained policy (a scripted teacher), sent by value."""

    def key(self) -> str:
        digest = hashlib.sha256(self.pickled).hexdigest()[:16] if self.pickled is not None else ""
        return f"{self.spec}\x00{self.version}\x00{sorted(self.kwargs.items())}\x00{digest}"

    def build(self) -> Policy:
        """The policy on the node, at the driver's weights version."""
        if self.pickled is not None:
            return pickle.loads(self.pickled)
        p: Any = make_policy(self.spec, **self.kwargs)
        if hasattr(p, "_version"):
            p._version = self.version
        else:
            p.version = self.version
        return p


def policy_ref(policy: Policy, export_dir: Path | None = None) -> PolicyRef:
    """How nodes rebuild ``policy``; an in-process transformers policy is saved under ``export_dir``
    (once per weights version)."""
    name = policy.name
    if name.split(":", 1)[0] in _SCRIPTED:
        return PolicyRef(name, policy.version)
    if name.startswith("openai:"):
        kw = {k: getattr(policy, k) for k in _OPENAI_SETTINGS if hasattr(policy, k)}
        return PolicyRef(name, policy.version, kw)
    if name.startswith("hf:") and hasattr(policy, "save"):
        if export_dir is None:
            raise ConfigError(
                "a transformers policy on Ray nodes needs a directory the nodes read (export_dir)"
            )
        d = export_dir / f"policy-v{policy.version}"
        if not (d / "config.json").is_file():
            tmp = d.with_name(d.name + ".tmp")
            policy.save(tmp)
            tmp.rename(d)
        kw = {k: getattr(policy, k) for k in _HF_SETTINGS if hasattr(policy, k)}
        return PolicyRef(f"hf:{d}", policy.version, kw)
    try:  # a scripted policy of plain data: sent by value (once per weights version)
        return PolicyRef(name, policy.version, pickled=pickle.dumps(policy))
    except Exception:
        pass
    raise ConfigError(
        f"policy {name!r} cannot be rebuilt on Ray nodes: use oracle, random, adversarial, openai:URL#MODEL or hf:PATH"
    )
