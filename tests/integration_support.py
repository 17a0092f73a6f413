"""Helpers of the adapter tests (sparring.integrations): reference actions, `sparring judge score` as the
reward's ground truth, and a check for sandboxes left on the host."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from sparring.tasks.loader import Task

SPARRING = [str(Path(sys.executable).parent / "sparring")]


def call(i: int, name: str, **args: Any) -> dict[str, Any]:
    """One assistant message making one tool call."""
    fn = {"name": name, "arguments": json.dumps(args)}
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": f"c{i}", "type": "function", "function": fn}],
    }


def reference_actions(task: Task) -> list[dict[str, Any]]:
    """The tool calls writing the task's reference solution, then submit."""
    files, deleted = task.solution_files()
    assert not deleted
    out = [
        call(i, "write_file", path=p, content=b.decode()) for i, (p, b) in enumerate(sorted(files.items()))
    ]
    return [*out, call(len(out), "submit")]


def judge_score_cli(task_dir: Path, files: dict[str, bytes], out: Path) -> dict[str, Any]:
    """`sparring judge score --json` on the task's initial workspace with ``files`` written over it."""
    shutil.copytree(task_dir / "workspace", out)
    for rel, data in files.items():
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_bytes(data)
    r = subprocess.run([*SPARRING, "judge", "score", "--task", str(task_dir), "--workspace", str(out), "--json"],
                       capture_output=True, text=True, timeout=300, env=os.environ.copy())  # fmt: skip
    assert r.returncode == 0, r.stderr
    result: dict[str, Any] = json.loads(r.stdout)
    return result


def _home(root: Path) -> Path:
    """Where a backend rooted at ``root`` keeps its sandboxes (``root/sandboxes`` links to it)."""
    return (root / "sandboxes").resolve()


def sandbox_ids(root: Path) -> set[str]:
    """The ids of the sandboxes living under a backend root now."""
    return {p.name.removeprefix("sb-") for p in _home(root).glob("sb-*")}


def leftovers(root: Path, ids: set[str]) -> list[str]:
    """What sandboxes ``ids`` (made under ``root``) left on the host: dirs, mounts, cgroups."""
    home = _home(root)
    out = [f"dir {p}" for p in home.glob("sb-*")]
    with open("/proc/self/mountinfo") as f:
        out += [f"mount {m}" for ln in f for m in [ln.split()[4]] if m.startswith(f"{home}/sb-")]
    cg = Path("/sys/fs/cgroup")
    out += [f"cgroup {c}" for i in ids for c in [*cg.glob(f"sparring/{i}"), *cg.glob(f"*/sparring/{i}")]]
    return out


# -- a task a tiny random model can score on, and a tiny model that calls tools -----------------------

SCRIBBLE_HIDDEN = """from pathlib import Path

TEXT = Path("answer.txt").read_text() if Path("answer.txt").is_file() else ""


def test_has_seven():
    assert "7" in TEXT


def test_says_hello():
    assert "hello" in TEXT.lower()


def test_is_short():
    assert len(TEXT) < 40


def test_is_not_blank():
    assert TEXT.strip()
"""
SCRIBBLE_IDS = [f"test_hidden_scribble.py::{n}" for n in ("test_has_seven", "test_says_hello", "test_is_short",
                                                           "test_is_not_blank")]  # fmt: skip


def make_scribble_task(out: Path, task_id: str = "scribble") -> Task:
    """A task whose reward is the fraction of four properties answer.txt has: any text scores something
    between 0 and 1, so a tiny random model's samples differ in reward (GRPO has a signal to follow)."""
    from sparring.tasks.loader import write_task
    from sparring.tasks.spec import JudgeSpec, TaskSpec

    spec = TaskSpec(
        id=task_id, family="scribble",
        instruction="Write answer.txt: a short greeting that contains the number 7.",
        success_criteria="answer.txt is short, not blank, says hello and contains 7.",
        judge=JudgeSpec(hidden_tests=SCRIBBLE_IDS, weights={"pass_fraction": 1.0}),
    )  # fmt: skip
    return write_task(out, spec, workspace={"answer.txt": "\n"}, hidden={"test_hidden_scribble.py": SCRIBBLE_HIDDEN},
                      solution={"answer.txt": "hello 7\n"})  # fmt: skip


TOOL_REPLIES = [
    '<tool_call>{"name": "write_file", "arguments": {"path": "answer.txt", "content": "hello 7"}}</tool_call>',
    '<tool_call>{"name": "write_file", "arguments": {"path": "answer.txt", "content": "hi"}}</tool_call>',
    '<tool_call>{"name": "submit", "arguments": {}}</tool_call>',
]


def warm_up_tool_model(src: Path, out: Path, task: Task, steps: int = 100, seed: int = 0,
                       lessons: list[tuple[Task, list[str], list[Any] | None]] | None = None) -> Path:  # fmt: skip
    """The tiny model taught, for a few SGD steps, to answer the task's prompt with one of TOOL_REPLIES
    (or each task of ``lessons`` with one of its replies, its prompt rendered with the tools given, else
    the Environment's): its samples then make real (and different) tool calls, so episodes run tools in
    sandboxes and their rewards differ. Nothing is downloaded; seconds on a CPU."""
    import shutil

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from sparring.env import Environment

    torch.manual_seed(seed)
    tok = AutoTokenizer.from_pretrained(str(src))
    model = AutoModelForCausalLM.from_pretrained(str(src))
    batches = []  # one batch per lesson: its prompts are of one length, so little padding
    for lesson_task, replies, tools in lessons or [(task, TOOL_REPLIES, None)]:
        env = Environment(lesson_task)
        prompt = tok.apply_chat_template(
            env.messages, tools=tools or env.tools, add_generation_prompt=True, tokenize=False
        )
        p = tok(prompt, add_special_tokens=False)["input_ids"]
        rows = [p + tok(r + "<|end|>", add_special_tokens=False)["input_ids"] for r in replies]
        width = max(map(len, rows))
        pad = tok.pad_token_id
        ids = torch.tensor([r + [pad] * (width - len(r)) for r in rows])
        labels = torch.tensor([[-100] * len(p) + r[len(p) :] + [-100] * (width - len(r)) for r in rows])
        mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
        batches.append((ids, labels, mask))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    model.train()
    for _ in range(steps):  # one batch of each lesson's replies per step
        for ids, labels, mask in batches:
            model(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()
        opt.step()
        opt.zero_grad()
    shutil.copytree(src, out)
    model.save_pretrained(str(out))
    return out


def custom_tool_replies(task: Task, n: int = 3) -> list[str]:
    """The first ``n`` calls of a task's reference (its own tools, e.g. the tool-use store's), as replies."""
    calls = task.solution_calls()[:n]
    return [f"<tool_call>{json.dumps({'name': name, 'arguments': args})}</tool_call>" for name, args in calls]
