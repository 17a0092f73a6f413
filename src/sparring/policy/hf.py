"""A local transformers causal LM as a Policy (``hf:PATH``, or :meth:`HFPolicy.from_model` on live weights).

Any HF causal LM with a chat template works: the prompt is
``tokenizer.apply_chat_template(messages, tools=...)`` (Sparring's tokenizers
carry Sparring's template; a hub model keeps its own), a turn stops at the
template's end-of-turn token, and the sampled text is parsed with the
tool-call format the template writes (:class:`~sparring.policy.chat_codec.ChatCodec`).

Token-in, token-out: each turn returns the exact prompt ids, sampled ids and
their log-probabilities. Given the earlier turns' traces
(``ActRequest.traces``), the next prompt is the previous prompt + the ids the
model sampled + the ids of what the environment appended
(:meth:`ChatCodec.continuation_ids`), so a whole episode is one exact token
sequence; ``usage["prompt_continued"]`` says a prompt was built that way and
``usage["prompt_reencoded"]`` that it could not be (it then was re-rendered,
and the export counts that boundary as a mismatch).

The logprob stored per sampled token is ``log softmax(logits)[token]`` at
temperature 1, i.e. log pi_theta(token | prefix) of the model itself, which is
what the importance ratio pi_new / pi_old of PPO/GRPO needs, whatever
temperature or top-p shaped the sampling.

Sampling is batched: :meth:`HFPolicy.generate_turns` samples many requests with
one ``model.generate`` call (left-padded); concurrent :meth:`HFPolicy.act`
calls are coalesced into such batches (a GRPO group's turns go together), and
:meth:`HFPolicy.act_batch` takes a group explicitly. Every request samples
from its own random stream (a ``torch.Generator`` seeded from the policy seed,
the conversation's opening, the request's seed, sample_index and step:
:func:`request_seed`), drawn by :func:`_row_sampler` inside ``generate``, so
which requests happen to share a batch (sandbox timing) never changes a token:
a seed pins every sample. Blocking torch work runs in a worker
thread; a trainer holds :attr:`HFPolicy.lock` while it updates the weights.
torch and transformers are imported lazily.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparring.chat_format import tool_call_count
from sparring.errors import PolicyError
from sparring.policy.base import Action, ActRequest, Message, ToolSchema
from sparring.policy.chat_codec import ChatCodec
from sparring.trajectory import TokenTrace

MAX_TOP_LOGPROBS = 20


def _mix_seed(*parts: int) -> int:
    """A 63-bit seed from several ints (stable across processes, unlike hash())."""
    digest = hashlib.sha256(":".join(str(int(p)) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def request_seed(policy_seed: int, request: ActRequest) -> int:
    """The seed of one request's own random stream: (policy seed, conversation, episode seed, sample, turn).

    The conversation is its opening (the messages up to the first user message: system prompt and
    instruction), so the same episode gets the same stream wherever it is sampled (in-process or behind
    ``serve-policy``) and different tasks of one run never share one.
    """
    head = []
    for m in request.messages:
        head.append(f"{m.get('role')}\x00{m.get('content') or ''}")
        if m.get("role") == "user":
            break
    opening = int.from_bytes(hashlib.sha256("\x01".join(head).encode()).digest()[:6], "little")
    return _mix_seed(policy_seed, opening, request.seed, request.sample_index, request.step)


def _row_sampler(seeds: Sequence[int], temperature: float, top_p: float) -> Any:
    """A logits processor that samples each batch row from its own generator (see :class:`HFPolicy`).

    It returns scores that are 0 at the sampled token and -inf elsewhere, so the
    greedy step of ``generate`` takes exactly that token. Each row draws one
    uniform number per step from its own generator, whatever the other rows do,
    and picks by inverse CDF over the temperature- and top-p-shaped distribution.
    """
    import torch
    from transformers import LogitsProcessor

    gens = [torch.Generator().manual_seed(s) for s in seeds]

    class _RowSampler(LogitsProcessor):
        def __call__(self, input_ids: Any, scores: Any) -> Any:
            probs = torch.softmax(scores.double() / temperature, dim=-1)
            if top_p < 1.0:
                sorted_p, order = probs.sort(dim=-1, descending=True)
                # keep the smallest prefix whose mass reaches top_p (the first token always)
                drop = (sorted_p.cumsum(-1) - sorted_p) >= top_p
                sorted_p = sorted_p.masked_fill(drop, 0.0)
                probs = torch.zeros_like(probs).scatter(-1, order, sorted_p)
            cdf = probs.cumsum(-1)
            out = torch.full_like(scores, float("-inf"))
            for b, g in enumerate(gens):
                u = torch.rand((), generator=g, dtype=torch.float64) * cdf[b, -1]
                tok = int(torch.searchsorted(cdf[b], u.reshape(1), right=True).clamp(max=cdf.shape[-1] - 1))
                while probs[b, tok] <= 0 and tok > 0:  # a zero-mass token is never picked
                    tok -= 1
                out[b, tok] = 0.0
            return out

    return _RowSampler()


def _Cancelled(event: threading.Event, base: Any) -> Any:  # noqa: N802 (a class, built lazily)
    """A StoppingCriteria that ends every row once ``event`` is set (the caller gave up)."""
    import torch

    class Cancelled(base):
        def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
            return torch.full(
                (input_ids.shape[0],), event.is_set(), dtype=torch.bool, device=input_ids.device
            )

    return Cancelled()


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


@dataclass(frozen=True)
class Prompt:
    """One turn's prompt ids and how they were made."""

    ids: list[int]
    dropped: int = 0
    """Oldest messages left out to fit ``max_prompt_tokens`` (re-rendered prompts only)."""
    continued: bool = False
    """Built from the previous turn's exact ids (token-in, token-out)."""
    reencoded: bool = False
    """There was a previous turn but its ids could not be continued: the conversation was re-rendered."""


@dataclass(frozen=True)
class Sample:
    """What one row of a batched ``generate`` produced."""

    completion_ids: list[int]
    logprobs: list[float]
    top_logprobs: list[list[tuple[int, float]]] | None = None


def _previous_trace(messages: Sequence[Message], traces: Sequence[TokenTrace]) -> TokenTrace | None:
    """The latest trace of an assistant turn that is in ``messages`` (the one to continue from)."""
    for t in reversed(traces):
        i = t.message_index
        if (
            i is not None and 0 <= i < len(messages) and messages[i].get("role") == "assistant"
            and t.prompt_ids and t.completion_ids
        ):  # fmt: skip
            return t
    return None


def droppable_turns(messages: Sequence[Message]) -> list[tuple[int, int]]:
    """``(start, stop)`` of each middle turn that may leave a prompt too long, oldest first.

    A turn is an assistant message with the tool results and notes that follow
    it (so no tool result is kept without its call), or a user message that
    follows another user message. The
    head (everything up to and including the first user message: system prompt
    and instruction) and the turn holding the last message are never droppable.
    """
    first_user = next((i for i, m in enumerate(messages) if m.get("role") == "user"), len(messages))
    starts = [
        i
        for i, m in enumerate(messages)
        if i > first_user
        and (
            m.get("role") == "assistant"
            or (m.get("role") == "user" and messages[i - 1].get("role") == "user")
        )
    ]
    bounds = [*starts, len(messages)]
    return [(a, b) for a, b in zip(bounds, bounds[1:], strict=False) if b < len(messages)]


class _Coalescer:
    """Batches the requests that wait together: whoever holds the lock samples everything queued."""

    def __init__(self, policy: HFPolicy, loop: asyncio.AbstractEventLoop) -> None:
        self.policy = policy
        self.loop = loop
        self.lock = asyncio.Lock()
        self.pending: list[tuple[ActRequest, asyncio.Future[Action]]] = []

    async def submit(self, request: ActRequest) -> Action:
        fut: asyncio.Future[Action] = self.loop.create_future()
        self.pending.append((request, fut))
        try:
            async with self.lock:
                while not fut.done():  # batches in arrival order until this caller's turn is sampled
                    await asyncio.sleep(0)  # a yield, not a wait: requests issued in this same tick join
                    await self._run_batch(fut)
            return await fut
        except asyncio.CancelledError:
            fut.cancel()  # nobody waits for this turn any more: it is not sampled (or its result is dropped)
            raise

    async def _run_batch(self, owner: asyncio.Future[Action]) -> None:
        live = [(r, f) for r, f in self.pending if not f.done()]  # a cancelled caller's turn is dropped
        batch, self.pending = live[: self.policy.max_batch], live[self.policy.max_batch :]
        if not batch:
            return
        cancel = threading.Event()
        try:
            actions = await asyncio.to_thread(
                self.policy.generate_turns, [r for r, _ in batch], cancel=cancel
            )
        except asyncio.CancelledError:  # the caller running the batch gave up: the others' turns go back
            cancel.set()  # and the generation stops at its next token, freeing the model's lock
            self.pending[:0] = [(r, f) for r, f in batch if f is not owner and not f.done()]
            raise
        except Exception as e:
            for _, f in batch:
                if not f.done():
                    f.set_exception(e)
        else:
            for (_, f), a in zip(batch, actions, strict=True):
                if not f.done():
                    f.set_result(a)


class HFPolicy:
    """Policy backed by a transformers causal LM and its tokenizer (a directory, or live objects)."""

    path: Path | None

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
        tool_format: str | None = None,
        max_batch: int = 64,
    ) -> None:
        self.path = Path(path)
        _check_model_dir(self.path)
        try:
            from transformers import AutoModelForCausalLM, AutoTokenizer

            tokenizer: Any = AutoTokenizer.from_pretrained(str(self.path), local_files_only=True)
            model: Any = AutoModelForCausalLM.from_pretrained(str(self.path), local_files_only=True)
            model = model.to(device).eval()
        except Exception as e:
            msg = " ".join(str(e).split())[:300]
            raise PolicyError(f"cannot load model from {self.path}: {type(e).__name__}: {msg}") from None
        self._bind(
            model, tokenizer, name=f"hf:{path}", max_new_tokens=max_new_tokens, temperature=temperature,
            top_p=top_p, seed=seed, max_prompt_tokens=max_prompt_tokens, device=device,
            tool_format=tool_format, max_batch=max_batch,
        )  # fmt: skip

    @classmethod
    def from_model(
        cls,
        model: Any,
        tokenizer: Any,
        *,
        name: str | None = None,
        max_new_tokens: int = 96,
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int = 0,
        max_prompt_tokens: int = 1536,
        tool_format: str | None = None,
        max_batch: int = 64,
    ) -> HFPolicy:
        """A policy that samples with ``model`` itself (a trainer's live weights: no copy is made).

        Sampling switches the model to eval mode and back to whatever mode it was in.
        """
        self = cls.__new__(cls)
        self.path = None
        try:
            device = str(next(model.parameters()).device)
        except (StopIteration, AttributeError, TypeError):
            device = "cpu"
        label = name or str(
            getattr(getattr(model, "config", None), "_name_or_path", "") or type(model).__name__
        )
        self._bind(
            model, tokenizer, name=f"hf:{label}", max_new_tokens=max_new_tokens, temperature=temperature,
            top_p=top_p, seed=seed, max_prompt_tokens=max_prompt_tokens, device=device,
            tool_format=tool_format, max_batch=max_batch,
        )  # fmt: skip
        return self

    def _bind(
        self, model: Any, tokenizer: Any, *, name: str, max_new_tokens: int, temperature: float, top_p: float,
        seed: int, max_prompt_tokens: int, device: str, tool_format: str | None, max_batch: int,
    ) -> None:  # fmt: skip
        if (
            max_new_tokens < 1
            or max_prompt_tokens < 1
            or temperature < 0
            or not 0 < top_p <= 1
            or max_batch < 1
        ):
            raise PolicyError(
                "bad sampling settings: need max_new_tokens >= 1, max_prompt_tokens >= 1, temperature >= 0, "
                f"0 < top_p <= 1, max_batch >= 1 (got {max_new_tokens}, {max_prompt_tokens}, {temperature}, "
                f"{top_p}, {max_batch})"
            )
        self.name = name
        self.model: Any = model
        self.tokenizer: Any = tokenizer
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.top_p = top_p
        self.seed = seed
        self.device = device
        self.max_batch = max_batch
        self._version = 0
        self.lock = threading.RLock()  # held while sampling or updating weights
        self._coalescer: _Coalescer | None = None
        self.generate_calls = 0  # model.generate calls so far (one per batch)
        gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        extra = [gen_eos] if isinstance(gen_eos, int) else list(gen_eos or [])
        self.codec = ChatCodec(tokenizer, tool_format=tool_format, stop_ids=extra)
        self.stop_ids: frozenset[int] = self.codec.stop_ids
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.pad_id: int = int(pad if pad is not None else 0)
        limit = int(getattr(getattr(model, "config", None), "max_position_embeddings", 0) or 0)
        # prompt + completion must fit the model's context
        self.max_prompt_tokens = (
            min(max_prompt_tokens, limit - max_new_tokens) if limit else max_prompt_tokens
        )
        if self.max_prompt_tokens < 1:
            raise PolicyError(f"max_new_tokens={max_new_tokens} leaves no room in the {limit}-token context")

    @property
    def tool_format(self) -> str:
        """The tool-call format this policy's template writes and its parser reads."""
        return self.codec.format.name

    # ------------------------------------------------------------------ protocol

    @property
    def version(self) -> int:
        return self._version

    def bump_version(self) -> int:
        """Record a weight update (trajectories store the version they were sampled with)."""
        self._version += 1
        return self._version

    async def act(self, request: ActRequest) -> Action:
        """One turn; concurrent calls are sampled together in one batched ``generate``."""
        loop = asyncio.get_running_loop()
        if self._coalescer is None or self._coalescer.loop is not loop:
            self._coalescer = _Coalescer(self, loop)
        return await self._coalescer.submit(request)

    async def act_batch(self, requests: Sequence[ActRequest]) -> list[Action]:
        """Several turns (e.g. a GRPO group's) sampled with one ``generate`` call, in order."""
        cancel = threading.Event()
        try:
            return await asyncio.to_thread(self.generate_turns, list(requests), cancel=cancel)
        except asyncio.CancelledError:
            cancel.set()  # the caller gave up: stop generating (and free the lock) at the next token
            raise

    async def close(self) -> None:
        return None

    # ------------------------------------------------------------------ prompts

    def encode_prompt(
        self, messages: list[Message], tools: list[ToolSchema], traces: Sequence[TokenTrace] = ()
    ) -> Prompt:
        """This turn's prompt ids: the previous turn's exact ids continued when there is one, else rendered.

        A rendered prompt must fit ``max_prompt_tokens``: whole middle turns go
        first, oldest first (:func:`droppable_turns`); the system prompt, the
        instruction, the tool schemas and the last turn are kept. Only if even
        that is too long do the other non-system messages go (the instruction
        among them), and only then are the ids left-truncated.
        """
        prev = _previous_trace(messages, traces)
        if prev is not None and prev.message_index is not None:
            done = prev.completion_ids[-1] in self.stop_ids
            cont = self.codec.continuation_ids(messages, tools, prev.message_index, ended=done)
            if cont is not None:
                ids = [*prev.prompt_ids, *prev.completion_ids, *cont]
                if len(ids) <= self.max_prompt_tokens:
                    return Prompt(ids, continued=True)
        kept = list(messages)
        dropped = 0
        while True:
            ids = self.codec.prompt_ids(kept, tools)
            if len(ids) <= self.max_prompt_tokens:
                return Prompt(ids, dropped, reencoded=prev is not None)
            turns = droppable_turns(kept)
            if turns:
                start, stop = turns[0]
            else:  # head + last turn still too long: the instruction goes before the system prompt
                start = next((i for i, m in enumerate(kept[:-1]) if m.get("role") != "system"), -1)
                stop = start + 1
            if start < 0:
                return Prompt(ids[-self.max_prompt_tokens :], dropped, reencoded=prev is not None)
            del kept[start:stop]
            dropped += stop - start

    # ------------------------------------------------------------------ sampling

    def _act_sync(self, request: ActRequest) -> Action:
        return self.generate_turns([request])[0]

    def generate_turns(
        self,
        requests: Sequence[ActRequest],
        *,
        temperature: float | None = None,
        top_p: float | None = None,
        max_new_tokens: int | None = None,
        top_logprobs: int = 0,
        cancel: threading.Event | None = None,
    ) -> list[Action]:
        """Sample one assistant turn per request with a single batched ``generate`` call.

        ``cancel``: once set (the caller gave up), generation stops at the next
        token and :class:`PolicyError` is raised; the model's lock is free again.

        ``temperature``, ``top_p`` and ``max_new_tokens`` (capped at the policy's)
        override the policy's settings for this call only; ``top_logprobs`` > 0
        also returns that many most likely (token id, logprob) per position in
        each trace's ``top_logprobs``.
        """
        if not requests:
            return []
        if not 0 <= top_logprobs <= MAX_TOP_LOGPROBS:
            raise PolicyError(f"top_logprobs must be in 0..{MAX_TOP_LOGPROBS} (got {top_logprobs})")
        try:
            prompts = [self.encode_prompt(r.messages, r.tools, r.traces) for r in requests]
            seeds = [request_seed(self.seed, r) for r in requests]
            with self.lock:
                samples = self._generate(
                    [p.ids for p in prompts], seeds,
                    temperature=self.temperature if temperature is None else temperature,
                    top_p=self.top_p if top_p is None else top_p,
                    max_new_tokens=min(max_new_tokens or self.max_new_tokens, self.max_new_tokens),
                    top_logprobs=top_logprobs, cancel=cancel,
                )  # fmt: skip
            if cancel is not None and cancel.is_set():
                raise PolicyError(f"{self.name}: generation cancelled (its caller gave up)")
        except PolicyError:
            raise
        except Exception as e:  # a torch/tokenizer fault is the policy's failure, not the rollout's crash
            raise PolicyError(f"{self.name}: generation failed: {type(e).__name__}: {e}") from None
        return [self._action(r, p, s) for r, p, s in zip(requests, prompts, samples, strict=True)]

    def _action(self, request: ActRequest, prompt: Prompt, sample: Sample) -> Action:
        parsed = self.codec.parse(sample.completion_ids, request.tools)
        message = parsed.to_message(id_offset=tool_call_count(request.messages))
        if parsed.errors:
            message["parse_errors"] = list(parsed.errors)
        usage = {
            "prompt_tokens": len(prompt.ids),
            "completion_tokens": len(sample.completion_ids),
            "messages_dropped": prompt.dropped,
            "prompt_continued": int(prompt.continued),
            "prompt_reencoded": int(prompt.reencoded),
        }
        trace = TokenTrace(
            prompt_ids=prompt.ids, completion_ids=sample.completion_ids, logprobs=sample.logprobs,
            top_logprobs=sample.top_logprobs,
        )  # fmt: skip
        return Action(message=message, trace=trace, usage=usage)

    def _generate(
        self, prompts: list[list[int]], seeds: list[int], *, temperature: float, top_p: float,
        max_new_tokens: int, top_logprobs: int = 0, cancel: threading.Event | None = None,
    ) -> list[Sample]:  # fmt: skip
        """One left-padded ``model.generate`` over all prompts; each row cut at its first stop token.

        Row ``b`` samples from its own generator seeded with ``seeds[b]``.
        """
        import torch
        from transformers import GenerationConfig, LogitsProcessorList, StoppingCriteria, StoppingCriteriaList

        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for b, p in enumerate(prompts):
            ids[b, width - len(p) :] = torch.tensor(p, dtype=torch.long)
            mask[b, width - len(p) :] = 1
        sampling = temperature > 0
        # Every knob set: unset ones would be filled from the model's generation_config (a hub
        # model's top_k, repetition_penalty...), and the policy samples what its settings say.
        # generate itself runs greedy: the sampling is _row_sampler's, one random stream per row.
        config = GenerationConfig(
            max_new_tokens=max_new_tokens, do_sample=False, temperature=1.0,
            top_p=1.0, top_k=0, min_p=None, typical_p=1.0, repetition_penalty=1.0,
            no_repeat_ngram_size=0, min_new_tokens=0, eos_token_id=sorted(self.stop_ids), pad_token_id=self.pad_id,
            bos_token_id=None, output_logits=True, return_dict_in_generate=True, num_beams=1,
        )  # fmt: skip
        devices = [torch.device(self.device)] if torch.device(self.device).type == "cuda" else []
        was_training = bool(getattr(self.model, "training", False))
        self.model.eval()
        try:
            processors = LogitsProcessorList([_row_sampler(seeds, temperature, top_p)] if sampling else [])
            stops = StoppingCriteriaList([_Cancelled(cancel, StoppingCriteria)] if cancel is not None else [])
            with torch.no_grad(), torch.random.fork_rng(devices=devices):
                out = self.model.generate(
                    input_ids=ids.to(self.device),
                    attention_mask=mask.to(self.device),
                    generation_config=config,
                    logits_processor=processors,
                    stopping_criteria=stops,
                )
        finally:
            if was_training:
                self.model.train()
        self.generate_calls += 1
        new = out.sequences[:, width:].cpu()
        logp = torch.log_softmax(
            torch.stack(out.logits, dim=1).float(), dim=-1
        ).cpu()  # [B, T, V], temperature 1
        chosen = logp.gather(-1, new.unsqueeze(-1)).squeeze(-1)
        top = logp.topk(top_logprobs, dim=-1) if top_logprobs else None
        samples = []
        for b in range(len(prompts)):
            row = new[b].tolist()
            n = next((i + 1 for i, t in enumerate(row) if t in self.stop_ids), len(row))
            tops = None
            if top is not None:
                tops = [
                    list(zip(top.indices[b, i].tolist(), top.values[b, i].tolist(), strict=True))
                    for i in range(n)
                ]
            samples.append(Sample(row[:n], chosen[b, :n].tolist(), tops))
        return samples

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
            "tool_format": self.tool_format,
        }
