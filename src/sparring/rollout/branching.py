"""Forked rollouts: at chosen turns an episode's sandbox is snapshotted and K branches continue from there.

A branch point is a turn t of a root episode: after the policy's t-th turn has
been applied, the sandbox's workspace is snapshotted (a read-only layer, ms)
and its ``/tmp`` and home directory are archived (a tar taken inside the
sandbox). Once the root has been played, each branch point starts K new
sandboxes from the snapshot with the archive unpacked into them, copies the
root's conversation up to turn t, and lets the policy carry on (with its own
seed, so sampled policies diverge); every branch is judged and stored like a
root, with ``parent_id`` (the root) and ``branch_turn`` (t).

What a fork carries: the filesystem the agent can write (``/workspace``,
``/tmp``, ``$HOME``). What it does not: running processes (a server the agent
started, a background job), their memory and open sockets, and ``/dev/shm``.
Tasks whose state lives in a process (the service-recovery family, and any
task with loopback networking: something listens there) are refused: a branch
of them would start from a state the root never had. See
``docs/process-and-forks.md``.

Branch points are given as turns (``1,2``), the first N turns (``first:N``),
every turn (``all``), or the N turns the policy was least sure of (``entropy:N``):
the root then keeps a branch point after every turn and, once played, forks only
at the N states whose next turn had the highest mean surprisal, ``-mean(logprob)``
over its sampled tokens (an unbiased estimate of the per-token entropy of the
policy there; :func:`select_points`). That needs a policy that reports token
logprobs (``hf:``, ``serve-policy``); with none, no branch is forked. A branch's trajectory id is a function of its root's id,
its turn and its index, so a resumed run rewrites (never duplicates) the
branches of a root it replays, and skips those of a stored root.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sparring.env.environment import Mark
from sparring.errors import ConfigError, SandboxError, WorkspaceFault
from sparring.sandbox.base import Sandbox
from sparring.tasks.loader import Task
from sparring.trajectory import TokenTrace

if TYPE_CHECKING:
    from sparring.rollout.episode import Episode

PROCESS_STATE_FAMILIES = frozenset({"service-recovery"})
"""Families whose state lives in running processes: never forked."""
EXTRA_DIRS = ("tmp", "home/agent")
"""What a fork carries besides the workspace (relative to the sandbox's /)."""
ARCHIVE = "/dev/shm/.sparring-fork.tgz"  # /dev/shm: not among the archived directories
PACK = (
    f"tar -C / -czf {ARCHIVE} --ignore-failed-read --warning=no-file-changed {' '.join(EXTRA_DIRS)} 2>/dev/null; "
    f"wc -c < {ARCHIVE}"
)
UNPACK = "tar -C / -xzf - 2>&1"
CHUNK = 700_000
"""Archive bytes read per command: base64 of it fits one command's output cap (1 MiB)."""
EXTRAS_CAP = 64 << 20
"""Most archive bytes a branch point carries; beyond it the turn is no branch point (the agent's doing)."""


@dataclass(frozen=True)
class BranchPlan:
    """Where to fork (``turns``, the ``first`` N turns, ``every`` turn, or the ``entropy`` N most uncertain
    turns) and how many branches each."""

    branches: int
    turns: frozenset[int] = frozenset()
    first: int = 0
    every: bool = False
    entropy: int = 0

    def forks_at(self, turn: int) -> bool:
        """Whether the root takes a branch point after ``turn`` (with ``entropy``: every turn, a candidate)."""
        return self.every or bool(self.entropy) or turn in self.turns or 1 <= turn <= self.first

    def to_json(self) -> dict[str, object]:
        if self.every:
            at = "all"
        elif self.entropy:
            at = f"entropy:{self.entropy}"
        else:
            at = f"first:{self.first}" if self.first else ",".join(map(str, sorted(self.turns)))
        return {"branch_at": at, "branches": self.branches}


def parse_branch_plan(at: str | None, branches: int) -> BranchPlan | None:
    """``--branch-at`` (``1,2`` / ``first:N`` / ``entropy:N`` / ``all``) and ``--branches K``; None when
    neither is given."""
    if at is None or not at.strip():
        if branches:
            raise ConfigError("--branches needs --branch-at (turns like 1,2, first:N, entropy:N or all)")
        return None
    if branches < 1:
        raise ConfigError(f"--branches must be at least 1 with --branch-at (got {branches})")
    spec = at.strip()
    if spec == "all":
        return BranchPlan(branches, every=True)
    for prefix in ("first:", "entropy:"):
        if spec.startswith(prefix):
            n = spec[len(prefix) :]
            if not n.isdigit() or int(n) < 1:
                raise ConfigError(f"--branch-at {at!r}: write {prefix}N with N >= 1")
            if prefix == "first:":
                return BranchPlan(branches, first=int(n))
            return BranchPlan(branches, entropy=int(n))
    parts = [p.strip() for p in spec.split(",")]
    if not all(p.isdigit() and int(p) >= 1 for p in parts):
        raise ConfigError(
            f"--branch-at {at!r}: write turns >= 1 separated by commas (1,2), first:N, entropy:N or all"
        )
    return BranchPlan(branches, turns=frozenset(int(p) for p in parts))


def process_state_reason(task: Task) -> str | None:
    """Why ``task`` cannot be forked (its state lives in a process), or None."""
    if task.spec.family in PROCESS_STATE_FAMILIES:
        return f"family {task.spec.family} keeps its state in a running service"
    if task.spec.limits.network == "loopback":
        return "it has loopback networking (a service may hold its state)"
    return None


def check_branchable(tasks: list[Task]) -> None:
    """ConfigError naming the first task whose state lives in a process (forks carry files only)."""
    for t in tasks:
        why = process_state_reason(t)
        if why is not None:
            raise ConfigError(
                f"cannot fork task {t.id}: {why}, and forks carry files, not running processes; "
                "drop --branch-at or leave such tasks out"
            )


@dataclass(frozen=True)
class BranchPoint:
    """A root's state after ``turn``: the workspace snapshot (in ``mark``) and /tmp + home as a tar.gz."""

    turn: int
    mark: Mark
    extras: bytes
    traces_before: int = -1
    """How many token traces the root had at this point: the next turn's is ``traces[traces_before]``."""


def turn_surprisal(trace: TokenTrace | None) -> float | None:
    """``-mean(logprob)`` of a turn's sampled tokens (its per-token entropy, estimated); None without them."""
    lps = trace.logprobs if trace is not None else None
    if not lps:
        return None
    return -sum(float(x) for x in lps) / len(lps)


def select_points(plan: BranchPlan, points: list[BranchPoint], traces: list[TokenTrace]) -> list[BranchPoint]:
    """The branch points ``plan`` forks at among those the root took: all of them, except under
    ``entropy:N``, where only the N whose next turn had the highest surprisal (earlier first on a tie;
    points with no next turn, or whose next turn has no logprobs, are never chosen). Pure."""
    if not plan.entropy:
        return list(points)
    scored = []
    for p in points:
        nxt = traces[p.traces_before] if 0 <= p.traces_before < len(traces) else None
        score = turn_surprisal(nxt)
        if score is not None:
            scored.append((-score, p.turn, p))
    return sorted(
        (p for _, _, p in sorted(scored, key=lambda x: x[:2])[: plan.entropy]), key=lambda p: p.turn
    )


async def capture_extras(sandbox: Sandbox, timeout: float = 60.0) -> bytes:
    """/tmp and the home directory of ``sandbox`` as a gzipped tar (taken inside it, read out in
    chunks that fit one command's output)."""
    r = await sandbox.exec(["sh", "-c", PACK], timeout=timeout)
    if r.timed_out or r.exit_code != 0 or not r.stdout.strip().isdigit():
        raise SandboxError(f"archiving /tmp and home for a fork failed: {(r.stdout + r.stderr)[:200]}")
    size = int(r.stdout.strip())
    if size > EXTRAS_CAP:
        await sandbox.exec(["rm", "-f", ARCHIVE], timeout=timeout)
        raise WorkspaceFault(
            f"/tmp and home hold {size} bytes (gzipped), more than a fork carries", "workspace_too_large"
        )
    parts = []
    try:
        for off in range(0, size, CHUNK):
            c = await sandbox.exec(["sh", "-c", f"tail -c +{off + 1} {ARCHIVE} | head -c {CHUNK} | base64 -w0"],
                                   timeout=timeout)  # fmt: skip
            if c.exit_code != 0 or c.truncated:
                raise SandboxError(f"reading the fork archive failed: {c.stderr[:200]}")
            parts.append(base64.b64decode(c.stdout.strip(), validate=True))
    finally:
        await sandbox.exec(["rm", "-f", ARCHIVE], timeout=timeout)
    data = b"".join(parts)
    if len(data) != size:
        raise SandboxError(f"the fork archive changed while it was read ({len(data)} of {size} bytes)")
    return data


async def restore_extras(sandbox: Sandbox, data: bytes, timeout: float = 60.0) -> None:
    """Unpack :func:`capture_extras`'s archive into ``sandbox``."""
    if not data:
        return
    r = await sandbox.exec(["sh", "-c", UNPACK], timeout=timeout, stdin=data)
    if r.exit_code != 0:
        raise SandboxError(f"unpacking /tmp and home into a fork failed: {(r.stdout + r.stderr)[:200]}")


def branch_id(root_id: str, turn: int, k: int) -> str:
    """The trajectory id of branch ``k`` forked at ``turn`` of ``root_id`` (stable across resumes)."""
    return hashlib.sha256(f"{root_id}\x00branch\x00{turn}\x00{k}".encode()).hexdigest()[:32]


def branch_seed(seed: int, turn: int, k: int) -> int:
    """The seed a branch's policy samples with: its own, so branches of a sampled policy diverge."""
    return zlib.crc32(f"{seed}:{turn}:{k}".encode()) & 0x7FFFFFFF


def fork_episode(root: Episode, point: BranchPoint, k: int) -> Episode:
    """A new episode holding ``root``'s conversation up to ``point`` (to be played from its snapshot)."""
    from sparring.rollout.episode import Episode

    ep = Episode(
        root.task, root.policy, sample_index=root.sample_index, seed=branch_seed(root.seed, point.turn, k),
        max_steps=root.max_steps, wall_s=root.wall_s, limits=root.limits, snapshot_every=root.snapshot_every,
        model_sem=root.model_sem,
    )  # fmt: skip
    env, src = ep.env, root.env
    env.messages = copy.deepcopy(src.messages)
    env.steps = [s.model_copy() for s in src.steps]
    env.traces = list(src.traces)  # frozen records: shared, never changed
    env.mark = point.mark
    env.rewind()  # back to the branch point: the root's later turns are dropped, clocks as they were then
    return ep
