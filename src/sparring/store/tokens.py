"""A trajectory's episode as exact token sequences (token-in, token-out), built from its turn traces.

Each assistant turn's trace holds the ids the policy saw (``prompt_ids``) and
sampled (``completion_ids``, with ``logprobs``). A token-level policy builds
turn k+1's prompt as turn k's prompt + its sampled ids + the ids of what the
environment appended (tool results, the next generation prompt), so the whole
episode is one sequence::

    prompt_ids      = turn 0's prompt
    completion_ids  = sampled_0 + appended_1 + sampled_1 + appended_2 + ...
    logprobs        = the policy's logprob per sampled token, 0.0 per appended token
    policy_mask     = 1 per sampled token, 0 per appended token (TRL's ``env_mask``)

Nothing is re-tokenised: the appended ids are read off turn k+1's own prompt.
Where turn k+1's prompt does *not* start with turn k's prompt + sampled ids
(the policy re-rendered the conversation: a server that does not continue token
ids, a prompt cut to fit the context), that boundary is a **mismatch**: it is
counted, never patched, and the episode continues as a new segment from there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sparring.trajectory import TokenTrace, Trajectory


@dataclass
class TokenSequence:
    """One exact token sequence: a prompt, then sampled and appended ids in order."""

    prompt_ids: list[int]
    completion_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    policy_mask: list[int] = field(default_factory=list)
    turns: list[int] = field(default_factory=list)
    """Indices (into the trajectory's traces) of the turns this sequence holds."""
    logprobs_missing: bool = False
    """Some sampled turn came without logprobs (its positions hold 0.0): do not use them as pi_old."""

    def _add(self, ids: Sequence[int], logprobs: Sequence[float] | None, mask: int) -> None:
        self.completion_ids.extend(ids)
        self.policy_mask.extend([mask] * len(ids))
        if logprobs is not None and len(logprobs) == len(ids):
            self.logprobs.extend(float(x) for x in logprobs)
        else:
            self.logprobs.extend([0.0] * len(ids))
            self.logprobs_missing |= bool(mask and ids)

    def to_json(self) -> dict[str, Any]:
        return {
            "prompt_ids": self.prompt_ids,
            "completion_ids": self.completion_ids,
            "logprobs": None if self.logprobs_missing else self.logprobs,
            "policy_mask": self.policy_mask,
            "turns": self.turns,
        }


@dataclass
class EpisodeTokens:
    """An episode's token sequences (one per segment) and how many turn boundaries did not line up."""

    segments: list[TokenSequence]
    mismatches: int = 0

    @property
    def sampled_tokens(self) -> int:
        return sum(sum(s.policy_mask) for s in self.segments)


def episode_tokens(traces: Trajectory | Sequence[TokenTrace]) -> EpisodeTokens:
    """The exact token sequences of an episode from its turn traces (see the module docstring)."""
    turns = traces.traces if isinstance(traces, Trajectory) else traces
    segments: list[TokenSequence] = []
    mismatches = 0
    cur: TokenSequence | None = None
    for k, t in enumerate(turns):
        prompt, sampled = t.prompt_ids, t.completion_ids
        if not prompt and not sampled:
            continue
        if cur is not None:
            head = cur.prompt_ids + cur.completion_ids
            if prompt[: len(head)] == head:
                cur._add(prompt[len(head) :], None, 0)
            else:
                mismatches += 1
                cur = None
        if cur is None:
            cur = TokenSequence(prompt_ids=list(prompt))
            segments.append(cur)
        cur._add(sampled, t.logprobs, 1)
        cur.turns.append(k)
    return EpisodeTokens(segments, mismatches)


def token_rows(traj: Trajectory) -> tuple[list[dict[str, Any]], int]:
    """One export row per segment of ``traj`` (ids, logprobs, mask and the trajectory's labels), and
    the trajectory's mismatch count."""
    ep = episode_tokens(traj)
    rows = [
        {
            "id": traj.id,
            "segment": i,
            "task_id": traj.task_id,
            "status": traj.status,
            "reward": traj.reward,
            "group_id": traj.group_id,
            "policy_version": traj.policy_version,
            **seq.to_json(),
            "mismatches": ep.mismatches,
        }
        for i, seq in enumerate(ep.segments)
    ]
    return rows, ep.mismatches
