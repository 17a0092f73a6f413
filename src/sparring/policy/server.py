"""An OpenAI-compatible chat-completions HTTP server over an in-process Policy (``sparring serve-policy``).

Endpoints (also without the ``/v1`` prefix):

- ``GET /health`` -> ``{"status": "ok", "model", "version"}`` (answers while a generation runs)
- ``GET /v1/models`` -> ``{"object": "list", "data": [{"id": NAME, "object": "model", ...}]}``
- ``POST /update_weights_from_disk`` ``{"model_path", "version"?}`` (SGLang's weight-update
  interface): the trainer's weight sync; a local model loads the new weights in place.
- ``POST /v1/chat/completions`` (non-streaming) with ``model, messages, tools, temperature,
  top_p, max_tokens, seed, logprobs, return_token_ids, return_tokens_as_token_ids``.

The reply has the OpenAI shape (``choices[0].message`` with ``content`` and
``tool_calls``, ``finish_reason`` ``tool_calls`` / ``stop`` / ``length``, ``usage``)
plus the vLLM extras that :mod:`sparring.policy.openai_http` reads back into a
:class:`~sparring.policy.base.TokenTrace`: ``prompt_token_ids`` (top level),
``choices[0].token_ids`` (with ``return_token_ids``) and
``choices[0].logprobs.content[*].logprob`` (with ``logprobs``; each token is
written ``token_id:N`` under ``return_tokens_as_token_ids``).

Errors are OpenAI-style ``{"error": {"message", "type", "code"}}``: 400 for bad
JSON or fields, 404 for an unknown model or path, 413 for a huge body, 500 when
the policy fails.

``n`` > 1 returns ``n`` choices (sampled as ``sample_index`` 0..n-1, one batched
``generate`` for a local model); ``top_logprobs`` (0..20, with ``logprobs``) fills
each token's ``top_logprobs``; a policy that cannot give them is answered 400,
never an empty list.

Generation is one request at a time per server (and the policy holds its own
lock); every connection has its own thread, so ``/health`` stays responsive.
An :class:`~sparring.policy.hf.HFPolicy` is called at its sampling level
(:meth:`~sparring.policy.hf.HFPolicy.generate_turns`) so a request's
``temperature``, ``top_p`` and ``max_tokens`` (capped at the policy's
``max_new_tokens``) apply to that request only; ``seed`` maps to
``ActRequest.seed`` (sample_index = step = 0 for the first choice), so the same
prompt and seed give the same tokens as ``policy.act`` in-process.
Any other Policy is driven through ``act()`` on a private event loop.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from sparring.errors import PolicyError
from sparring.policy.base import Action, ActRequest, Policy, PolicyTask

MAX_BODY_BYTES = 32 * 1024 * 1024
MAX_N = 64  # samples per request
MAX_TOP_LOGPROBS = 20  # OpenAI's bound
_CONN_TIMEOUT_S = 60.0  # an idle keep-alive connection is closed after this


class _HTTPError(Exception):
    def __init__(self, status: int, message: str, type_: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type_


def _placeholder_task() -> PolicyTask:
    """ActRequest needs a task view; a served request has none (model policies never read it)."""
    return PolicyTask(
        id="served-request", family="served", instruction="(a request served over HTTP: no task)", tools=()
    )


def _default_name(policy: Policy) -> str:
    path = getattr(policy, "path", None)
    if isinstance(path, Path) and path.name:
        return path.name
    return str(getattr(policy, "name", "policy"))


def _number(body: dict[str, Any], key: str) -> float | None:
    v = body.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise _HTTPError(400, f"'{key}' must be a number, got {type(v).__name__}")
    return float(v)


def _integer(body: dict[str, Any], key: str) -> int | None:
    v = body.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise _HTTPError(400, f"'{key}' must be an integer, got {type(v).__name__}")
    return v


class PolicyServer:
    """Serve ``policy`` at ``http://HOST:PORT/v1`` (``port=0`` picks a free port).

    ``start()`` listens and serves in a background thread; ``stop()`` shuts it
    down; also a context manager. :attr:`url` is the OpenAI base URL (with ``/v1``).
    """

    def __init__(
        self,
        policy: Policy,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        name: str | None = None,
    ) -> None:
        self.policy = policy
        self.host = host
        self.port = port
        self.model_name = name or _default_name(policy)
        self.created = int(time.time())
        self._task = _placeholder_task()
        self._gen_lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: threading.Thread | None = None
        self.requests_served = 0

    # ------------------------------------------------------------------ lifecycle

    @property
    def url(self) -> str:
        """The OpenAI base URL, e.g. ``http://127.0.0.1:8000/v1``."""
        if self._httpd is None:
            raise RuntimeError("PolicyServer is not started")
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self._httpd.server_address[1]}/v1"

    def start(self) -> PolicyServer:
        if self._httpd is not None:
            return self
        server = self

        class Handler(_Handler):
            owner = server

        httpd = ThreadingHTTPServer((self.host, self.port), Handler)
        httpd.daemon_threads = True
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.2}, name="policy-server", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        httpd, self._httpd = self._httpd, None
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        loop, self._loop = self._loop, None
        if loop is not None:
            loop.call_soon_threadsafe(loop.stop)
            if self._loop_thread is not None:
                self._loop_thread.join(timeout=5)
            self._loop_thread = None

    def __enter__(self) -> PolicyServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ generation

    def _run_async(self, request: ActRequest) -> Action:
        """A generic Policy: its act() on one private event loop (its locks live on that loop)."""
        if self._loop is None:
            loop = asyncio.new_event_loop()
            t = threading.Thread(target=loop.run_forever, name="policy-server-loop", daemon=True)
            t.start()
            self._loop, self._loop_thread = loop, t
        return asyncio.run_coroutine_threadsafe(self.policy.act(request), self._loop).result()

    def _generate(
        self, request: ActRequest, overrides: dict[str, Any], n: int, top_logprobs: int
    ) -> list[Action]:
        """``n`` samples of one request: a local model samples them in one batched ``generate``."""
        from sparring.policy.hf import HFPolicy

        pol = self.policy
        requests = [replace(request, sample_index=i) for i in range(n)]
        with self._gen_lock:
            if not isinstance(pol, HFPolicy):
                if top_logprobs:
                    raise _HTTPError(
                        400, f"top_logprobs is not available for {self.model_name} (not a local model)"
                    )
                return [self._run_async(r) for r in requests]
            return pol.generate_turns(
                requests, temperature=overrides.get("temperature"), top_p=overrides.get("top_p"),
                max_new_tokens=overrides.get("max_tokens"), top_logprobs=top_logprobs,
            )  # fmt: skip

    def _token_text(self, tok: int) -> str:
        tokenizer = getattr(self.policy, "tokenizer", None)
        if tokenizer is None:
            return f"token_id:{tok}"
        try:
            return str(tokenizer.decode([tok], skip_special_tokens=False))
        except Exception:
            return f"token_id:{tok}"

    def complete(self, body: Any) -> dict[str, Any]:
        """One chat completion from a decoded request body; raises _HTTPError on bad input."""
        if not isinstance(body, dict):
            raise _HTTPError(400, "the request body must be a JSON object")
        model = body.get("model")
        if model is not None and model != self.model_name:
            raise _HTTPError(
                404, f"model {model!r} not found: this server serves {self.model_name!r}", "not_found_error"
            )
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
            raise _HTTPError(400, "'messages' must be a non-empty list of message objects")
        if any(not isinstance(m.get("role"), str) for m in messages):
            raise _HTTPError(400, "every message needs a 'role' string")
        tools = body.get("tools") or []
        if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
            raise _HTTPError(400, "'tools' must be a list of tool objects")
        if body.get("stream"):
            raise _HTTPError(400, "streaming is not supported by this server: send stream=false")
        n = _integer(body, "n")
        n = 1 if n is None else n
        if not 1 <= n <= MAX_N:
            raise _HTTPError(400, f"'n' must be in 1..{MAX_N} (got {n})")
        top_logprobs = _integer(body, "top_logprobs") or 0
        if not 0 <= top_logprobs <= MAX_TOP_LOGPROBS:
            raise _HTTPError(400, f"'top_logprobs' must be in 0..{MAX_TOP_LOGPROBS} (got {top_logprobs})")
        if top_logprobs and not body.get("logprobs"):
            raise _HTTPError(400, "'top_logprobs' needs 'logprobs': true")
        temperature = _number(body, "temperature")
        top_p = _number(body, "top_p")
        max_tokens = _integer(body, "max_completion_tokens")
        if max_tokens is None:
            max_tokens = _integer(body, "max_tokens")
        seed = _integer(body, "seed")
        if temperature is not None and temperature < 0:
            raise _HTTPError(400, "'temperature' must be >= 0")
        if top_p is not None and not 0 < top_p <= 1:
            raise _HTTPError(400, "'top_p' must be in (0, 1]")
        if max_tokens is not None and max_tokens < 1:
            raise _HTTPError(400, "'max_tokens' must be >= 1")
        request = ActRequest(messages=messages, tools=tools, task=self._task, seed=seed or 0)
        overrides = {"temperature": temperature, "top_p": top_p, "max_tokens": max_tokens}
        try:
            actions = self._generate(request, overrides, n, top_logprobs)
        except _HTTPError:
            raise
        except PolicyError as e:
            raise _HTTPError(
                500, str(e).splitlines()[0] if str(e) else "policy failed", "server_error"
            ) from None
        except Exception as e:
            raise _HTTPError(500, f"policy failed: {type(e).__name__}: {e}", "server_error") from None
        self.requests_served += 1
        return self._response(body, actions)

    def _choice(self, body: dict[str, Any], index: int, action: Action) -> dict[str, Any]:
        """One ``choices[i]``: the message, why it stopped, and (asked for) its token ids and logprobs."""
        msg = action.message
        calls = msg.get("tool_calls") or []
        message: dict[str, Any] = {"role": "assistant", "content": msg.get("content") or ""}
        if calls:
            message["tool_calls"] = [
                {
                    "id": str(c.get("id") or f"call_{i}"),
                    "type": "function",
                    "function": {
                        "name": str((c.get("function") or {}).get("name", "")),
                        "arguments": _args_json((c.get("function") or {}).get("arguments")),
                    },
                }
                for i, c in enumerate(calls)
            ]
        trace = action.trace
        stop_ids: frozenset[int] = getattr(self.policy, "stop_ids", frozenset())
        if calls:
            finish = "tool_calls"
        elif (
            trace is not None
            and trace.completion_ids
            and stop_ids
            and trace.completion_ids[-1] not in stop_ids
        ):
            finish = "length"
        else:
            finish = "stop"
        choice: dict[str, Any] = {
            "index": index,
            "message": message,
            "finish_reason": finish,
            "logprobs": None,
        }
        if trace is None:
            return choice
        if body.get("return_token_ids"):
            choice["token_ids"] = list(trace.completion_ids)
        if body.get("logprobs") and trace.logprobs is not None:
            as_ids = bool(body.get("return_tokens_as_token_ids"))

            def token(tok: int) -> str:
                return f"token_id:{tok}" if as_ids else self._token_text(tok)

            tops = trace.top_logprobs or [[] for _ in trace.completion_ids]
            choice["logprobs"] = {
                "content": [
                    {
                        "token": token(tok),
                        "logprob": float(lp),
                        "bytes": list(token(tok).encode("utf-8")),
                        "top_logprobs": [
                            {"token": token(t), "logprob": float(v), "bytes": list(token(t).encode("utf-8"))}
                            for t, v in top
                        ],
                    }
                    for tok, lp, top in zip(trace.completion_ids, trace.logprobs, tops, strict=False)
                ]
            }
        return choice

    def _response(self, body: dict[str, Any], actions: list[Action]) -> dict[str, Any]:
        """The chat.completion object: one choice per sample, usage summed over them."""
        first = actions[0]
        prompt_n = int(first.usage.get("prompt_tokens", len(first.trace.prompt_ids) if first.trace else 0))
        completion_n = sum(
            int(a.usage.get("completion_tokens", len(a.trace.completion_ids) if a.trace else 0))
            for a in actions
        )
        out: dict[str, Any] = {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model_name,
            "choices": [self._choice(body, i, a) for i, a in enumerate(actions)],
            "usage": {
                "prompt_tokens": prompt_n,
                "completion_tokens": completion_n,
                "total_tokens": prompt_n + completion_n,
            },
        }
        if first.trace is not None:
            out["prompt_token_ids"] = list(first.trace.prompt_ids)
        return out

    def update_weights(self, body: Any) -> dict[str, Any]:
        """SGLang's ``POST /update_weights_from_disk`` (``{"model_path"}``): load new weights in place.

        The weights must fit the served model (same architecture); generation
        waits for the swap (the policy's lock), so no request sees half-updated weights.
        """
        path = body.get("model_path") if isinstance(body, dict) else None
        if not isinstance(path, str) or not path:
            raise _HTTPError(400, "'model_path' (a directory of *.safetensors) is required")
        model = getattr(self.policy, "model", None)
        if model is None:
            raise _HTTPError(400, f"{self.model_name} has no weights to update (not a local model)")
        files = sorted(Path(path).glob("*.safetensors"))
        if not files:
            raise _HTTPError(400, f"no *.safetensors under {path}")
        from safetensors.torch import load_file

        state: dict[str, Any] = {}
        for f in files:
            state.update(load_file(str(f)))
        current = model.state_dict()
        bad = [k for k, v in state.items() if k not in current or tuple(current[k].shape) != tuple(v.shape)]
        missing = [k for k in current if k not in state and "lm_head" not in k]
        if bad or missing:  # checked before touching anything: a refused update changes no weight
            raise _HTTPError(
                400, f"weights in {path} do not fit the served model (mismatched {(bad or missing)[:3]})"
            )
        with self._gen_lock, self.policy.lock:  # type: ignore[attr-defined]
            model.load_state_dict(state, strict=False)
            if hasattr(model, "tie_weights"):
                model.tie_weights()
            version = body.get("version")
            if hasattr(self.policy, "_version"):
                self.policy._version = int(version) if isinstance(version, int) else self.policy._version + 1
        return {
            "success": True,
            "message": f"loaded {len(state)} tensors from {path}",
            "version": self.health()["version"],
        }

    def health(self) -> dict[str, Any]:
        return {
            "status": "ok",
            "model": self.model_name,
            "version": int(getattr(self.policy, "version", 0) or 0),
            "busy": self._gen_lock.locked(),
            "requests_served": self.requests_served,
        }

    def models(self) -> dict[str, Any]:
        return {
            "object": "list",
            "data": [
                {"id": self.model_name, "object": "model", "created": self.created, "owned_by": "sparring"}
            ],
        }


def _args_json(args: Any) -> str:
    if isinstance(args, str):
        return args
    return json.dumps(args if args is not None else {}, ensure_ascii=False)


class _Handler(BaseHTTPRequestHandler):
    owner: PolicyServer
    protocol_version = "HTTP/1.1"
    timeout = _CONN_TIMEOUT_S
    server_version = "sparring-policy-server/1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet: the CLI prints what matters
        return None

    def _send(self, status: int, obj: dict[str, Any]) -> None:
        data = json.dumps(obj, ensure_ascii=False).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, err: _HTTPError) -> None:
        self._send(err.status, {"error": {"message": err.message, "type": err.type, "code": err.status}})

    def _route(self) -> str:
        path = self.path.split("?", 1)[0].rstrip("/")
        return path[3:] if path.startswith("/v1/") else path

    def do_GET(self) -> None:
        route = self._route()
        if route == "/health":
            self._send(200, self.owner.health())
        elif route == "/models":
            self._send(200, self.owner.models())
        else:
            self._error(_HTTPError(404, f"no such endpoint: GET {self.path}", "not_found_error"))

    def do_POST(self) -> None:
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length < 0 or length > MAX_BODY_BYTES:
            self.close_connection = True
            status = 413 if length > MAX_BODY_BYTES else 400
            self._error(_HTTPError(status, f"bad Content-Length (at most {MAX_BODY_BYTES} bytes)"))
            return
        raw = self.rfile.read(length) if length else b""
        if self._route() == "/update_weights_from_disk":
            try:
                self._send(200, self.owner.update_weights(json.loads(raw.decode("utf-8") or "{}")))
            except (UnicodeDecodeError, json.JSONDecodeError) as e:
                self._error(_HTTPError(400, f"the request body is not valid JSON: {e}"))
            except _HTTPError as e:
                self._error(e)
            return
        if self._route() != "/chat/completions":
            self._error(_HTTPError(404, f"no such endpoint: POST {self.path}", "not_found_error"))
            return
        try:
            body = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            self._error(_HTTPError(400, f"the request body is not valid JSON: {e}"))
            return
        try:
            self._send(200, self.owner.complete(body))
        except _HTTPError as e:
            self._error(e)
