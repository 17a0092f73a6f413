"""Weight sync from the trainer to an inference server, through the server's own interface.

* ``sglang`` (also ``sparring serve-policy``): write the weights with
  ``save_pretrained`` to a directory the server can read, then
  ``POST {base}/update_weights_from_disk {"model_path": DIR}``.
* ``vllm-lora``: write a LoRA adapter (a peft model's ``save_pretrained``) and
  ``POST {base}/v1/load_lora_adapter {"lora_name", "lora_path"}`` (vLLM with
  ``--enable-lora`` and ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``); rollouts then
  ask for model ``lora_name``.

Each push writes a fresh ``v{version}`` directory (older ones are removed once the
server acknowledged the newer), so the server never reads a half-written file.
"""

from __future__ import annotations

import json
import shutil
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Literal

from sparring.errors import PolicyError


class HTTPWeightSync:
    def __init__(self, base_url: str, directory: Path, kind: Literal["sglang", "vllm-lora"] = "sglang",
                 lora_name: str = "sparring", timeout_s: float = 120.0) -> None:  # fmt: skip
        self.base = base_url.rstrip("/").removesuffix("/v1")
        self.directory = Path(directory)
        self.kind = kind
        self.lora_name = lora_name
        self.timeout_s = timeout_s
        self.pushed: list[Path] = []

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        req = urllib.request.Request(self.base + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")  # fmt: skip
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as r:
                text = r.read().decode() or "{}"
        except urllib.error.HTTPError as e:
            raise PolicyError(
                f"weight sync to {self.base}{path} failed: HTTP {e.code}: {e.read().decode()[:300]}"
            ) from None
        except (urllib.error.URLError, OSError) as e:
            raise PolicyError(f"weight sync: cannot reach {self.base}{path}: {e}") from None
        try:
            out = json.loads(text)
        except json.JSONDecodeError:
            out = {"message": text}
        return out if isinstance(out, dict) else {"message": out}

    def push(self, policy: Any) -> dict[str, Any]:
        """Save the policy's current weights and tell the server to load them; returns the server's answer."""
        d = self.directory / f"v{policy.version:06d}"
        if d.exists():
            shutil.rmtree(d)
        policy.save(d) if self.kind == "sglang" else policy.model.save_pretrained(str(d))
        if self.kind == "sglang":
            out = self._post("/update_weights_from_disk", {"model_path": str(d), "version": policy.version})
            if out.get("success") is False:
                raise PolicyError(f"weight sync: the server refused the update: {out.get('message')}")
        else:
            out = self._post("/v1/load_lora_adapter", {"lora_name": self.lora_name, "lora_path": str(d)})
        for old in self.pushed:
            shutil.rmtree(old, ignore_errors=True)
        self.pushed = [d]
        return out
