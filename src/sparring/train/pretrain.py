"""Copy pretraining: give a random-init tiny model the copying a hub model brings from pretraining.

A hub chat model has read a great deal of text in which a name written earlier
is written again later in another form: files listed one per line and then
named in a command, a key looked up in a table. A random-init tiny model has
not. Its warm start then has to discover attention-based copying from a few
hundred demonstrations, and whether it does within the warm start's steps
depends on the initialisation: with the byte-level tokenizer, ``items`` at
the start of a line and `` items`` after a space are different tokens, so
the copy is a learned mapping, not an identity.

:func:`copy_exercises` makes generic copy exercises from the words of the
tokenizer corpus (no task's answer is in them): re-list a list with another
separator, and look a key up in a table. :func:`pretrain_copy` trains a
policy on them with the SFT loss (loss on the copied part only), before any
task data is seen. Deterministic per seed.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sparring.monitor.progress import Progress
    from sparring.policy.hf import HFPolicy

# How a list is written: one per line, one per escaped line (inside a JSON
# string, as tool output reaches the model), comma- or space-separated.
SEPARATORS: tuple[str, ...] = ("\n", "\\n", ", ", " ", "\t")
_EXTENSIONS = ("", "", "", ".txt", ".md", ".py", ".csv", ".json", ".log")
BATCH_SIZE = 32
LR = 3e-3
LM_SHARE = 0.25  # of each batch: windows of plain text (language modelling), the rest copy exercises
_WINDOW = 320  # characters per text window; the first quarter is context only
_WORD = re.compile(r"[A-Za-z][a-z]{2,9}")


def corpus_words(corpus: Iterable[str], *, limit: int = 4000) -> list[str]:
    """The distinct words of ``corpus`` (3-10 letters), most frequent first, at most ``limit``."""
    counts: dict[str, int] = {}
    for text in corpus:
        for w in _WORD.findall(text.replace("\\n", " ").replace("\\t", " ")):
            counts[w] = counts.get(w, 0) + 1
    return sorted(counts, key=lambda w: (-counts[w], w))[:limit]


def _item(rng: random.Random, words: list[str]) -> str:
    return rng.choice(words) + rng.choice(_EXTENSIONS)


def _relist(rng: random.Random, words: list[str]) -> tuple[str, str]:
    items = list(dict.fromkeys(_item(rng, words) for _ in range(rng.randint(1, 5))))
    first, second = rng.sample(SEPARATORS, 2)
    lead = rng.choice(['"', "", "$ ls\n", "files: "])
    marker = rng.choice([" ->", "\nagain:", "\n$ echo", "\nsame:"])
    return lead + first.join(items) + marker, " " + second.join(items)


def _lookup(rng: random.Random, words: list[str]) -> tuple[str, str]:
    keys = list(dict.fromkeys(rng.choice(words) for _ in range(rng.randint(2, 6))))
    table = {k: _item(rng, words) for k in keys}
    sep = rng.choice(["=", ": ", " -> ", "\t"])
    join = rng.choice(SEPARATORS[:3])
    query = rng.choice(keys)
    prompt = join.join(f"{k}{sep}{v}" for k, v in table.items()) + rng.choice(
        [f"\n{query}?", f"\nwhat is {query}:"]
    )
    return prompt, " " + table[query]


def copy_exercises(words: list[str], n: int, *, seed: int = 0) -> list[tuple[str, str]]:
    """``n`` (prompt, completion) copy exercises over ``words``; the completion is copied from the prompt."""
    if len(words) < 8:
        raise ValueError(f"copy pretraining needs at least 8 distinct corpus words, got {len(words)}")
    rng = random.Random(seed)
    return [(_relist if rng.random() < 0.6 else _lookup)(rng, words) for _ in range(n)]


def text_windows(texts: list[str], n: int, *, seed: int = 0) -> list[tuple[str, str]]:
    """``n`` (context, continuation) windows cut from ``texts`` at seeded places: next-token prediction."""
    texts = [t for t in texts if len(t) > 16]
    if not texts:
        raise ValueError("language-model windows need at least one text longer than 16 characters")
    rng = random.Random(seed)
    weights = [len(t) for t in texts]  # a random place in the texts laid end to end
    out = []
    for text in rng.choices(texts, weights=weights, k=n):
        start = rng.randrange(max(1, len(text) - _WINDOW))
        window = text[start : start + _WINDOW]
        cut = max(1, len(window) // 4)
        out.append((window[:cut], window[cut:]))
    return out


def pretrain_copy(
    policy: HFPolicy,
    words: list[str],
    *,
    steps: int,
    batch_size: int = BATCH_SIZE,
    lr: float = LR,
    seed: int = 0,
    texts: list[str] | None = None,
    lm_share: float = LM_SHARE,
    progress: Progress | None = None,
) -> list[float]:
    """Train ``policy`` on ``steps`` batches of fresh copy exercises; returns the loss of each step.

    With ``texts``, a share ``lm_share`` of each batch is windows of them (plain language modelling,
    as a hub model's pretraining mixes copying into ordinary text): the model then also knows the
    chat format, so the warm start's first steps do not start from a model sure of other tokens.
    """
    from sparring.monitor.progress import NoProgress
    from sparring.train.grpo import SFTTrainer

    prog = progress or NoProgress()
    trainer = SFTTrainer(policy, lr=lr)
    losses = []
    n_lm = round(batch_size * lm_share) if texts else 0
    prog.start("pretrain", steps, "tiny model: copy-pretraining steps")
    for s in range(steps):
        batch = copy_exercises(words, batch_size - n_lm, seed=seed * 1_000_003 + s)
        if n_lm:
            batch += text_windows(texts or [], n_lm, seed=seed * 1_000_003 + s)
        losses.append(trainer.step(batch)["sft/loss"])
        prog.advance("pretrain")
    prog.finish("pretrain")
    return losses
