"""Parse a policy SPEC (``oracle``, ``random``, ``script:FILE.json``, ``openai:URL#MODEL``, ``hf:PATH[#TOOL_FORMAT]``) into a Policy.

``hf:PATH`` takes any HF causal LM directory with a chat template, or a
``.gguf`` file (converted to a model folder once, then cached:
:mod:`sparring.policy.gguf`); its tool-call format is detected from the
template, or named after ``#`` (``sparring``, ``hermes``, ``qwen3_coder``,
``llama3_json``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sparring.errors import ConfigError
from sparring.policy.base import Policy

SPEC_HELP = "expected one of: oracle, random, adversarial[:CLASS], script:FILE.json, openai:URL#MODEL, hf:PATH[#TOOL_FORMAT]"


@dataclass(frozen=True)
class SamplingOptions:
    """Sampling and context settings a run gives its model policy (None: the policy's default)."""

    max_new_tokens: int | None = None
    """Tokens one turn may write."""
    temperature: float | None = None
    top_p: float | None = None
    max_prompt_tokens: int | None = None
    """``hf:`` only: the prompt budget; past it middle turns are dropped (never the instruction or tools)."""

    def given(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}

    def for_spec(self, spec: str) -> dict[str, Any]:
        """Keyword arguments for :func:`make_policy` of ``spec``; ConfigError if they do not apply to it."""
        given = self.given()
        if not given:
            return {}
        if spec.strip().startswith("hf:"):
            return given
        if spec.strip().startswith("openai:"):
            if "max_prompt_tokens" in given:
                raise ConfigError(
                    "--max-prompt-tokens applies to hf: policies only (the server keeps its context)"
                )
            out: dict[str, Any] = {}
            if "max_new_tokens" in given:
                out["max_tokens"] = given["max_new_tokens"]
            if "temperature" in given:
                out["temperature"] = given["temperature"]
            if "top_p" in given:
                out["extra_body"] = {"top_p": given["top_p"]}
            return out
        flags = ", ".join("--" + k.replace("_", "-") for k in given)
        raise ConfigError(f"{flags}: sampling settings apply to hf: and openai: policies, not {spec!r}")

    def record(self, policy_turn_s: float | None = None) -> dict[str, Any]:
        """What a run record keeps of these settings (nothing when all are defaults)."""
        out: dict[str, Any] = {"sampling": self.given()} if self.given() else {}
        if policy_turn_s is not None:
            out["policy_turn_s"] = policy_turn_s
        return out


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
        if sep and not Path(rest).exists():  # hf:PATH#FORMAT: the tool-call format, not detected
            if fmt not in TOOL_FORMATS:
                raise ConfigError(
                    f"bad policy spec {spec!r}: unknown tool-call format {fmt!r} "
                    f"(write hf:PATH#FORMAT, FORMAT one of {', '.join(TOOL_FORMATS)})"
                )
            rest, kwargs = head, {"tool_format": fmt, **kwargs}
        path = Path(rest)
        if path.suffix == ".gguf" and path.is_file():  # llama.cpp's format: converted once, then cached
            from sparring.policy.gguf import cached_model_dir

            path = cached_model_dir(path)
        if not (path / "config.json").is_file():
            raise ConfigError(
                f"bad policy spec {spec!r}: {path} is not a model directory (no config.json) nor a .gguf file"
            )
        from sparring.policy.hf import HFPolicy

        return HFPolicy(path, **kwargs)
    raise ConfigError(f"unknown policy spec {spec!r}: {SPEC_HELP}")
