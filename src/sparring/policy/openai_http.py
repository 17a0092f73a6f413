"""A policy served over the OpenAI chat-completions API (vLLM, SGLang, any compatible server).

Each turn is one ``POST {base_url}/chat/completions`` with the conversation,
the tool schemas, ``tool_choice: "auto"`` and ``logprobs: true``. Connection
errors, timeouts, 429 and 5xx are retried with exponential backoff (a 429's
``Retry-After`` is honoured, capped); other 4xx are the caller's mistake and
fail at once. Every failure ends as a one-line :class:`PolicyError`.

Token capture (so training never re-tokenises): the completion's logprobs come
from ``choices[0].logprobs.content[*].logprob``; token ids from vLLM/SGLang
extras when present: ``choices[0].token_ids`` (or tokens written
``"token_id:N"`` under ``return_tokens_as_token_ids``) and ``prompt_token_ids``
(top level or in the choice). With ``token_ids=True`` (default) the request
asks for them via ``return_token_ids`` / ``return_tokens_as_token_ids``;
servers that reject unknown fields (api.openai.com does) need ``token_ids=False``.

Tool calls: native ``tool_calls`` are normalised (string arguments, ids). A
reply without them whose content holds text calls gets ``tool_calls`` from
:func:`sparring.chat_format.parse_tool_calls` with the request's tools, the
same reader the ``hf:`` policy and the Environment use, so a turn parses the
same on every path; its content is left exactly as generated.
"""

from __future__ import annotations

import asyncio
import json
import random
import zlib
from collections.abc import Mapping
from typing import Any

import httpx

from sparring.errors import PolicyError
from sparring.policy.base import Action, ActRequest, Message
from sparring.trajectory import TokenTrace

_RETRY_AFTER_MAX_S = 30.0


class OpenAIPolicy:
    """The agent played by a model behind an OpenAI-compatible ``/chat/completions`` endpoint."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        timeout_s: float = 60.0,
        max_retries: int = 3,
        backoff_s: float = 0.5,
        temperature: float = 1.0,
        max_tokens: int = 512,
        transport: httpx.AsyncBaseTransport | None = None,
        token_ids: bool = True,
        extra_body: Mapping[str, Any] | None = None,
        max_connections: int = 64,
    ) -> None:
        """``max_retries`` counts retries after the first attempt; ``backoff_s`` doubles per retry."""
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.name = f"openai:{self.base_url}#{model}"
        self.version = 0  # the trainer bumps this after each weight sync to the server
        self.api_key = api_key
        self.timeout_s = timeout_s
        self.max_retries = max(0, int(max_retries))
        self.backoff_s = backoff_s
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.token_ids = token_ids
        self.extra_body = dict(extra_body or {})
        self._transport = transport
        self._limits = httpx.Limits(
            max_connections=max_connections, max_keepalive_connections=max_connections
        )
        self._client: httpx.AsyncClient | None = None
        self._client_loop: asyncio.AbstractEventLoop | None = None
        self._rng = random.Random()

    # -- HTTP ------------------------------------------------------------------------------------

    def _http(self) -> httpx.AsyncClient:
        """One pooled client per event loop (a pool cannot outlive the loop that opened it)."""
        loop = asyncio.get_running_loop()
        if self._client is None or self._client_loop is not loop or self._client.is_closed:
            headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
            self._client = httpx.AsyncClient(
                timeout=httpx.Timeout(self.timeout_s),
                limits=self._limits,
                headers=headers,
                transport=self._transport,
            )
            self._client_loop = loop
        return self._client

    def payload(self, request: ActRequest) -> dict[str, Any]:
        """The JSON body for one turn."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": request.messages,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            "logprobs": True,
            # Each sample of a group, and each turn, draws its own sampling seed (vLLM / SGLang
            # honour `seed`), so a GRPO group is not G copies of one sample and a replay is exact.
            "seed": zlib.crc32(f"{request.seed}:{request.sample_index}:{request.step}".encode()) & 0x7FFFFFFF,
        }
        if request.tools:
            body["tools"] = request.tools
            body["tool_choice"] = "auto"
        if self.token_ids:
            body["return_token_ids"] = True
            body["return_tokens_as_token_ids"] = True
        body.update(self.extra_body)
        return body

    def _delay(self, attempt: int, response: httpx.Response | None) -> float:
        if response is not None and response.status_code == 429:
            try:
                return min(float(response.headers.get("retry-after", "")), _RETRY_AFTER_MAX_S)
            except ValueError:
                pass
        # Full-range jitter keeps many rollout workers from retrying in lockstep.
        return self.backoff_s * (2**attempt) * self._rng.uniform(0.5, 1.0)

    async def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        url = f"{self.base_url}/chat/completions"
        attempts = self.max_retries + 1
        last = ""
        for attempt in range(attempts):
            response: httpx.Response | None = None
            try:
                response = await self._http().post(url, json=body)
            except httpx.TimeoutException:
                last = f"timed out after {self.timeout_s:g}s"
            except httpx.TransportError as e:
                last = f"connection failed: {type(e).__name__}: {_snippet(str(e)) or 'no detail'}"
            else:
                status = response.status_code
                if status < 400:
                    return self._decode(response)
                last = f"HTTP {status}: {_snippet(response.text)}"
                if status != 429 and status < 500:
                    raise PolicyError(f"{self.name}: {last} (not retried: the request was rejected)")
            if attempt + 1 < attempts:
                await asyncio.sleep(self._delay(attempt, response))
        raise PolicyError(f"{self.name}: {last} (gave up after {attempts} attempt(s) to {url})")

    def _decode(self, response: httpx.Response) -> dict[str, Any]:
        try:
            data = response.json()
        except ValueError:
            raise PolicyError(f"{self.name}: response is not JSON: {_snippet(response.text)}") from None
        if not isinstance(data, dict) or not isinstance(data.get("choices"), list) or not data["choices"]:
            raise PolicyError(f"{self.name}: response has no choices: {_snippet(response.text)}")
        return data

    async def check(self) -> None:
        """Preflight before a run: the server answers and serves ``model`` (one-line PolicyError if not).

        Asks ``GET {base_url}/models`` (retried like a turn). A server without
        that route (404/405) is given the benefit of the doubt; one that lists
        its models must list this one.
        """
        url = f"{self.base_url}/models"
        last = ""
        for attempt in range(self.max_retries + 1):
            try:
                response = await self._http().get(url)
            except httpx.TimeoutException:
                last = f"no answer within {self.timeout_s:g}s"
            except httpx.TransportError as e:
                last = f"{type(e).__name__}: {_snippet(str(e)) or 'connection failed'}"
            else:
                if response.status_code in (404, 405):
                    return
                if response.status_code >= 400:
                    raise PolicyError(f"policy server {self.base_url} answered HTTP {response.status_code} "
                                      f"to GET /models: {_snippet(response.text)}")  # fmt: skip
                try:
                    data = response.json()
                except ValueError:
                    raise PolicyError(f"{self.base_url} is not an OpenAI-compatible server "
                                      f"(GET /models is not JSON: {_snippet(response.text, 80)})") from None  # fmt: skip
                ids = (
                    [str(m.get("id")) for m in data.get("data") or [] if isinstance(m, dict)]
                    if isinstance(data, dict)
                    else []
                )
                if ids and self.model not in ids:
                    raise PolicyError(f"model {self.model!r} is not served by {self.base_url} "
                                      f"(it serves: {', '.join(ids[:10])})")  # fmt: skip
                return
            if attempt < self.max_retries:
                await asyncio.sleep(self._delay(attempt, None))
        raise PolicyError(f"cannot reach the policy server at {self.base_url}: {last} "
                          "(is it running? start one with `sparring serve-policy`)")  # fmt: skip

    # -- Policy ----------------------------------------------------------------------------------

    async def act(self, request: ActRequest) -> Action:
        data = await self._post(self.payload(request))
        choice = data["choices"][0]
        raw = choice.get("message") if isinstance(choice, dict) else None
        if not isinstance(raw, dict):
            raise PolicyError(f"{self.name}: choices[0] has no message")
        message = self._message(raw, request.messages, request.tools)
        usage = {k: int(v) for k, v in (data.get("usage") or {}).items() if isinstance(v, int | float)}
        return Action(message=message, trace=token_trace(data), usage=usage)

    def _message(
        self, raw: dict[str, Any], history: list[Message], tools: list[dict[str, Any]] | None = None
    ) -> Message:
        content = raw.get("content")
        message: Message = {"role": "assistant", "content": content if isinstance(content, str) else ""}
        calls = [
            normalise_call(c, i) for i, c in enumerate(raw.get("tool_calls") or []) if isinstance(c, dict)
        ]
        errors: list[str] = []
        if not calls and message["content"]:
            calls, errors = _text_tool_calls(message["content"], history, tools)
        if calls:
            message["tool_calls"] = calls
        if errors:  # the rollout answers them as an observation (popped before the message is kept)
            message["parse_errors"] = errors
        return message

    async def close(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            try:
                if self._client_loop is asyncio.get_running_loop():
                    await client.aclose()
            except RuntimeError:  # its loop is gone: nothing left to release
                pass

    def __repr__(self) -> str:
        return f"OpenAIPolicy({self.name!r})"


def _snippet(text: str, n: int = 200) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 3] + "..."


def normalise_call(call: dict[str, Any], index: int) -> dict[str, Any]:
    """An OpenAI tool call with an id and JSON-string arguments (some servers send a dict)."""
    raw_fn = call.get("function")
    fn: dict[str, Any] = raw_fn if isinstance(raw_fn, dict) else {}
    args = fn.get("arguments", "")
    if not isinstance(args, str):
        args = json.dumps(args if args is not None else {}, ensure_ascii=False)
    return {
        "id": str(call.get("id") or f"call_{index}"),
        "type": "function",
        "function": {"name": str(fn.get("name", "")), "arguments": args},
    }


def _text_tool_calls(
    content: str, history: list[Message], tools: list[dict[str, Any]] | None = None
) -> tuple[list[dict[str, Any]], list[str]]:
    """Tool calls written as text, read as every other path reads them, and one error per malformed one."""
    from sparring.chat_format import parse_tool_calls, tool_call_count

    offset = tool_call_count(history)  # keeps generated call ids unique in the conversation
    parsed = parse_tool_calls(content, tools)
    calls = parsed.to_message(id_offset=offset).get("tool_calls") or [] if parsed.tool_calls else []
    return [normalise_call(c, offset + i) for i, c in enumerate(calls)], list(parsed.errors)


def _token_id(entry: Mapping[str, Any]) -> int | None:
    token = entry.get("token")
    if isinstance(token, str) and token.startswith("token_id:"):
        try:
            return int(token[len("token_id:") :])
        except ValueError:
            return None
    return None


def _int_list(value: Any) -> list[int] | None:
    if isinstance(value, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in value):
        return list(value)
    return None


def token_trace(data: Mapping[str, Any]) -> TokenTrace | None:
    """The turn's tokens from a chat-completions response, or None if the server did not send them.

    Needs completion token ids and one float logprob per id. ``prompt_ids`` is
    empty when the server returns no ``prompt_token_ids``.
    """
    choice = data["choices"][0]
    lp = choice.get("logprobs") if isinstance(choice, dict) else None
    content = lp.get("content") if isinstance(lp, dict) else None
    if not isinstance(content, list) or not content:
        return None
    entries = [e for e in content if isinstance(e, dict)]
    raw_lps = [e.get("logprob") for e in entries]
    logprobs = [float(x) for x in raw_lps if isinstance(x, int | float) and not isinstance(x, bool)]
    if len(entries) != len(content) or len(logprobs) != len(content):
        return None
    completion = _int_list(choice.get("token_ids"))
    if completion is None:
        ids = [_token_id(e) for e in entries]
        completion = [i for i in ids if i is not None] if all(i is not None for i in ids) else None
    if completion is None or len(completion) != len(logprobs):
        return None
    prompt = _int_list(data.get("prompt_token_ids")) or _int_list(choice.get("prompt_token_ids")) or []
    return TokenTrace(prompt_ids=prompt, completion_ids=completion, logprobs=logprobs)
