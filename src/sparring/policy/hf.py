"""A local transformers causal LM as a Policy (``hf:PATH``).

One :meth:`HFPolicy.act` renders the conversation with the text template of
:mod:`sparring.chat_format`, samples one assistant turn token by token
(KV cache, temperature / top-p), stops at ``<|end|>`` or eos, parses the tool
calls and returns the exact token ids with their log-probabilities, so the
trainer never re-tokenises.

The logprob stored per sampled token is ``log softmax(logits)[token]`` at
temperature 1, i.e. log pi_theta(token | prefix) of the model itself, which is
what the importance ratio pi_new / pi_old of PPO/GRPO needs, whatever
temperature or top-p shaped the sampling.

Sampling is deterministic: the torch generator is seeded from
(policy seed, request.seed, request.sample_index, request.step). Blocking
torch work runs in a worker thread (``asyncio.to_thread``) under an
``asyncio.Lock``, one turn at a time; a trainer holds :attr:`HFPolicy.lock`
while it updates the weights. torch and transformers are imported lazily.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparring.chat_format import END, parse_tool_calls, render_prompt, tool_call_count
from sparring.errors import PolicyError
from sparring.policy.base import Action, ActRequest, Message, TokenTrace, ToolSchema

if TYPE_CHECKING:
    import torch


def _mix_seed(*parts: int) -> int:
    """A 63-bit seed from several ints (stable across processes, unlike hash())."""
    digest = hashlib.sha256(":".join(str(int(p)) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def _check_model_dir(path: Path) -> None:
    if not path.exists():
        raise PolicyError(
            f"model path not found: {path} (build one with sparring.train.model.build_tiny_model)"
        )
    if not path.is_dir() or not (path / "config.json").is_file():
        raise PolicyError(
            f"{path} is not a model directory: no config.json (expected a save_pretrained folder)"
        )
    if not any((path / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json")):
        raise PolicyError(
            f"{path} has no tokenizer files (tokenizer.json): save the tokenizer with the model"
        )


class HFPolicy:
    """Policy backed by a local ``save_pretrained`` directory (model + tokenizer)."""

    def __init__(
        self,
        path: str | Path,
        *,
        max_new_tokens: int = 96,
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int = 0,
        max_prompt_tokens: int = 1536,
        device: str = "cpu",
    ) -> None:
        self.path = Path(path)
        _check_model_dir(self.path)
        if max_new_tokens < 1 or max_prompt_tokens < 1 or temperature < 0 or not 0 < top_p <= 1:
            raise PolicyError(
                "bad sampling settings: need max_new_tokens >= 1, max_prompt_tokens >= 1, "
                f"temperature >= 0, 0 < top_p <= 1 (got {max_new_tokens}, {max_prompt_tokens}, {temperature}, {top_p})"
            )
        self.name = f"hf:{path}"
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.top_p = top_p
        self.seed = seed
        self.device = device
        self._version = 0
        self.lock = threading.RLock()  # held while sampling or updating weights
        self._alock: asyncio.Lock | None = None
        self._alock_loop: asyncio.AbstractEventLoop | None = None
        try:
            from transformers import AutoModelForCausalLM, AutoTokenizer

            self.tokenizer: Any = AutoTokenizer.from_pretrained(str(self.path), local_files_only=True)
            model: Any = AutoModelForCausalLM.from_pretrained(str(self.path), local_files_only=True)
            self.model: Any = model.to(device).eval()
        except Exception as e:
            msg = " ".join(str(e).split())[:300]
            raise PolicyError(f"cannot load model from {self.path}: {type(e).__name__}: {msg}") from None
        end_id = self.tokenizer.convert_tokens_to_ids(END)
        if not isinstance(end_id, int) or end_id == self.tokenizer.unk_token_id:
            raise PolicyError(
                f"the tokenizer in {self.path} has no {END} token: not built for this chat template"
            )
        self.end_id: int = end_id
        self.stop_ids: frozenset[int] = frozenset(
            i for i in (end_id, self.tokenizer.eos_token_id) if isinstance(i, int)
        )
        limit = int(getattr(self.model.config, "max_position_embeddings", 0) or 0)
        # prompt + completion must fit the model's context
        self.max_prompt_tokens = (
            min(max_prompt_tokens, limit - max_new_tokens) if limit else max_prompt_tokens
        )
        if self.max_prompt_tokens < 1:
            raise PolicyError(f"max_new_tokens={max_new_tokens} leaves no room in the {limit}-token context")

    # ------------------------------------------------------------------ protocol

    @property
    def version(self) -> int:
        return self._version

    def bump_version(self) -> int:
        """Record a weight update (trajectories store the version they were sampled with)."""
        self._version += 1
        return self._version

    async def act(self, request: ActRequest) -> Action:
        loop = asyncio.get_running_loop()
        if self._alock is None or self._alock_loop is not loop:
            self._alock, self._alock_loop = asyncio.Lock(), loop
        async with self._alock:
            return await asyncio.to_thread(self._act_sync, request)

    async def close(self) -> None:
        return None

    # ------------------------------------------------------------------ helpers

    def encode_prompt(self, messages: list[Message], tools: list[ToolSchema]) -> tuple[list[int], int]:
        """Prompt token ids within ``max_prompt_tokens`` and how many messages were dropped to fit.

        The oldest non-system messages go first; the last message is always kept.
        If even that is too long, the ids are left-truncated.
        """
        kept = list(messages)
        dropped = 0
        while True:
            ids = self.tokenizer.encode(render_prompt(kept, tools), add_special_tokens=False)
            if len(ids) <= self.max_prompt_tokens:
                return ids, dropped
            drop = next((i for i, m in enumerate(kept[:-1]) if m.get("role") != "system"), None)
            if drop is None:
                return ids[-self.max_prompt_tokens :], dropped
            del kept[drop]
            dropped += 1

    def _act_sync(self, request: ActRequest) -> Action:
        try:
            prompt_ids, dropped = self.encode_prompt(request.messages, request.tools)
            seed = _mix_seed(self.seed, request.seed, request.sample_index, request.step)
            with self.lock:
                completion_ids, logprobs = self._sample(prompt_ids, seed)
        except PolicyError:
            raise
        except Exception as e:  # a torch/tokenizer fault is the policy's failure, not the rollout's crash
            raise PolicyError(f"{self.name}: generation failed: {type(e).__name__}: {e}") from None
        text = str(self.tokenizer.decode(completion_ids, skip_special_tokens=False))
        parsed = parse_tool_calls(text)
        message = parsed.to_message(id_offset=tool_call_count(request.messages))
        if parsed.errors:
            message["parse_errors"] = list(parsed.errors)
        usage = {
            "prompt_tokens": len(prompt_ids),
            "completion_tokens": len(completion_ids),
            "messages_dropped": dropped,
        }
        return Action(message=message, trace=TokenTrace(prompt_ids, completion_ids, logprobs), usage=usage)

    def _next_token(self, logits: torch.Tensor, gen: torch.Generator) -> tuple[int, float]:
        """Sample from logits (temperature, top-p); return the token and its logprob at temperature 1."""
        import torch

        logits = logits.float()
        logp = torch.log_softmax(logits, dim=-1)
        if self.temperature == 0:
            tok = int(torch.argmax(logits))
            return tok, float(logp[tok])
        probs = torch.softmax(logits / self.temperature, dim=-1)
        if self.top_p < 1.0:
            sorted_p, order = torch.sort(probs, descending=True)
            cum = torch.cumsum(sorted_p, dim=-1)
            keep = (cum - sorted_p) < self.top_p  # the smallest prefix whose mass reaches top_p
            sorted_p = torch.where(keep, sorted_p, torch.zeros_like(sorted_p))
            probs = torch.zeros_like(probs).scatter(0, order, sorted_p)
        tok = int(torch.multinomial(probs, 1, generator=gen))
        return tok, float(logp[tok])

    def _sample(self, prompt_ids: list[int], seed: int) -> tuple[list[int], list[float]]:
        import torch

        gen = torch.Generator(device=self.device)
        gen.manual_seed(seed)
        completion: list[int] = []
        logprobs: list[float] = []
        # transformers 5 renamed past_key_values -> cache (argument and output field)
        base = self.model.get_base_model() if hasattr(self.model, "get_base_model") else self.model  # peft
        kw = "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"
        with torch.no_grad():
            inp = torch.tensor([prompt_ids], dtype=torch.long, device=self.device)
            out = self.model(input_ids=inp, use_cache=True)
            past = getattr(out, kw)
            logits = out.logits[0, -1]
            for _ in range(self.max_new_tokens):
                tok, lp = self._next_token(logits, gen)
                completion.append(tok)
                logprobs.append(lp)
                if tok in self.stop_ids:
                    break
                step = torch.tensor([[tok]], dtype=torch.long, device=self.device)
                out = self.model(input_ids=step, use_cache=True, **{kw: past})
                past = getattr(out, kw)
                logits = out.logits[0, -1]
        return completion, logprobs

    def save(self, path: str | Path) -> Path:
        """Write model and tokenizer with ``save_pretrained`` (loadable by ``HFPolicy(path)``)."""
        out = Path(path)
        out.mkdir(parents=True, exist_ok=True)
        with self.lock:
            from sparring.policy.lora_files import is_lora, save_lora_policy

            if is_lora(self.model):  # merged weights (a plain model dir) + the adapter in adapter/
                save_lora_policy(self.model, out)
            else:
                self.model.save_pretrained(str(out), safe_serialization=True)
            self.tokenizer.save_pretrained(str(out))
        return out

    def info(self) -> dict[str, Any]:
        """What a run record wants to know about this policy."""
        return {
            "name": self.name,
            "version": self._version,
            "max_new_tokens": self.max_new_tokens,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_prompt_tokens": self.max_prompt_tokens,
        }
