"""Parse a policy SPEC (``oracle``, ``random``, ``script:FILE.json``, ``openai:URL#MODEL``, ``hf:PATH[#TOOL_FORMAT]``) into a Policy.

``hf:PATH`` takes any HF causal LM directory with a chat template; its tool-call
format is detected from the template, or named after ``#`` (``sparring``,
``hermes``, ``qwen3_coder``, ``llama3_json``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sparring.errors import ConfigError
from sparring.policy.base import Policy

SPEC_HELP = "expected one of: oracle, random, adversarial[:CLASS], script:FILE.json, openai:URL#MODEL, hf:PATH[#TOOL_FORMAT]"


def make_policy(spec: str, **kwargs: Any) -> Policy:
    """A policy from its spec: ``oracle``, ``random``, ``adversarial[:CLASS]``, ``openai:URL#MODEL``, ``hf:PATH``."""
    spec = spec.strip()
    if spec == "oracle":
        from sparring.policy.scripted import OraclePolicy

        return OraclePolicy()
    if spec == "random":
        from sparring.policy.scripted import RandomPolicy

        return RandomPolicy()
    if spec == "adversarial" or spec.startswith("adversarial:"):
        from sparring.policy.scripted import AdversarialPolicy

        return AdversarialPolicy(spec.partition(":")[2] or None)
    if spec.startswith("script:"):
        from sparring.policy.scripted import ScriptPolicy

        return ScriptPolicy.from_file(spec[len("script:") :])
    if spec.startswith("openai:"):
        rest = spec[len("openai:") :]
        url, sep, model = rest.partition("#")
        if not sep or not model or not url.startswith(("http://", "https://")):
            raise ConfigError(f"bad policy spec {spec!r}: write openai:http://HOST:PORT/v1#MODEL")
        from sparring.policy.openai_http import OpenAIPolicy

        return OpenAIPolicy(url, model, **kwargs)
    if spec.startswith("hf:"):
        from sparring.chat_format.tool_formats import TOOL_FORMATS

        rest = spec[3:]
        head, sep, fmt = rest.rpartition("#")
        if sep and fmt in TOOL_FORMATS:  # hf:PATH#FORMAT: the tool-call format, not detected
            rest, kwargs = head, {"tool_format": fmt, **kwargs}
        path = Path(rest)
        if not (path / "config.json").is_file():
            raise ConfigError(f"bad policy spec {spec!r}: {path} is not a model directory (no config.json)")
        from sparring.policy.hf import HFPolicy

        return HFPolicy(path, **kwargs)
    raise ConfigError(f"unknown policy spec {spec!r}: {SPEC_HELP}")
