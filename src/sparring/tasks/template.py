"""The example task ``sparring tasks new DIR`` writes: small, complete, admitted as written.

A one-module package with a bug (``count_words`` does not lower-case the text), visible tests the
initial state fails, hidden tests that are a superset of them on other texts (so hard-coding the
visible examples earns nothing), and the reference solution. The same files are the task of the
"your own task" tutorial (docs/tutorial-own-task.md), which writes them by hand.
"""

from __future__ import annotations

from pathlib import Path

from sparring.errors import TaskError
from sparring.tasks.loader import Task, write_task
from sparring.tasks.spec import JudgeSpec, Limits, Provenance, TaskSpec

BUGGY = '''\
"""Word counting for plain text."""
import re

WORD = re.compile(r"[a-z']+")


def count_words(text):
    """A dict mapping each word of text, lower-cased, to how often it occurs."""
    counts = {}
    for word in WORD.findall(text):
        counts[word] = counts.get(word, 0) + 1
    return counts


def top_words(text, n=3):
    """The n most frequent words as (word, count) pairs, most frequent first, ties alphabetical."""
    counts = count_words(text)
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:n]
'''
FIXED = BUGGY.replace("WORD.findall(text)", "WORD.findall(text.lower())")
VISIBLE = """\
from wordcount import count_words, top_words


def test_counts_lower_case_words():
    assert count_words("a rose is a rose") == {"a": 2, "rose": 2, "is": 1}


def test_counts_ignore_case():
    assert count_words("The cat saw the dog") == {"the": 2, "cat": 1, "saw": 1, "dog": 1}


def test_top_words():
    assert top_words("b a b c a b", n=2) == [("b", 3), ("a", 2)]
"""
HIDDEN = """\
from wordcount import count_words, top_words


def test_counts_lower_case_words():
    assert count_words("a rose is a rose") == {"a": 2, "rose": 2, "is": 1}


def test_counts_ignore_case():
    assert count_words("The cat saw the dog") == {"the": 2, "cat": 1, "saw": 1, "dog": 1}


def test_counts_capitals_only():
    assert count_words("NO, No, no!") == {"no": 3}


def test_keeps_apostrophes():
    assert count_words("Don't stop; don't") == {"don't": 2, "stop": 1}


def test_empty_text():
    assert count_words("") == {}


def test_top_words_ignore_case():
    assert top_words("Apple banana apple Cherry BANANA apple", n=2) == [("apple", 3), ("banana", 2)]
"""
HIDDEN_TESTS = [
    f"test_hidden_wordcount.py::{name}"
    for name in (
        "test_counts_lower_case_words",
        "test_counts_ignore_case",
        "test_counts_capitals_only",
        "test_keeps_apostrophes",
        "test_empty_text",
        "test_top_words_ignore_case",
    )
]
INSTRUCTION = (
    "The function count_words in wordcount/__init__.py should count words case-insensitively, but "
    "capitalised words are miscounted: some tests in tests/test_wordcount.py fail. Fix the bug in "
    "wordcount/ without editing, adding or deleting any tests. Run the visible tests with run_tests, then submit."
)
SUCCESS = (
    "Every hidden test of wordcount passes (a superset of tests/test_wordcount.py on other texts), "
    "with the tests unchanged."
)


def example_spec(task_id: str) -> TaskSpec:
    return TaskSpec(
        id=task_id,
        family="my-tasks",
        instruction=INSTRUCTION,
        success_criteria=SUCCESS,
        limits=Limits(max_steps=8),
        judge=JudgeSpec(hidden_tests=HIDDEN_TESTS),
        tags=["example"],
        provenance=Provenance(generator="sparring tasks new", source="sparring.tasks.template"),
    )


def new_task(out: Path, task_id: str | None = None) -> Task:
    """Write the example task into ``out`` (which must not exist yet, or be empty); returns it, pinned."""
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise TaskError(f"{out} already exists and is not an empty directory: choose a new path")
    name = task_id or out.resolve().name
    try:
        spec = example_spec(name)
    except ValueError:
        raise TaskError(
            f"{name!r} is not a task id (letters, digits, '.', '_', '-'; first a letter or digit): pass --id"
        ) from None
    if out.is_dir():
        out.rmdir()
    return write_task(
        out,
        spec,
        workspace={"wordcount/__init__.py": BUGGY, "tests/test_wordcount.py": VISIBLE},
        hidden={"test_hidden_wordcount.py": HIDDEN},
        solution={"wordcount/__init__.py": FIXED},
    )
