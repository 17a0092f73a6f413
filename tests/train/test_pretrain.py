"""Copy pretraining of the tiny model (sparring.train.pretrain): exercises, training, the build option."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparring.errors import ConfigError
from sparring.policy.hf import HFPolicy
from sparring.train.grpo import SFTTrainer
from sparring.train.model import build_tiny_model, default_corpus
from sparring.train.pretrain import SEPARATORS, copy_exercises, corpus_words, pretrain_copy, text_windows

EXE = Path(sys.executable).parent / "sparring"
WORDS = st.lists(st.from_regex(r"[a-z]{3,10}", fullmatch=True), min_size=8, max_size=40, unique=True)


def _items(text: str) -> list[str]:
    for sep in SEPARATORS:
        text = text.replace(sep, " ")
    return text.split()


@settings(max_examples=60, deadline=None)
@given(words=WORDS, seed=st.integers(0, 2**31))
def test_every_completion_is_copied_from_its_prompt(words, seed):
    for prompt, completion in copy_exercises(words, 20, seed=seed):
        assert completion.startswith(" ") and completion.strip()
        for item in _items(completion):  # every word of the answer stands in the prompt: a copy, not a recall
            assert item in prompt, (prompt, completion)


@settings(max_examples=30, deadline=None)
@given(words=WORDS, seed=st.integers(0, 2**31))
def test_exercises_are_deterministic_per_seed(words, seed):
    assert copy_exercises(words, 10, seed=seed) == copy_exercises(words, 10, seed=seed)


def test_exercises_vary_with_seed_and_change_the_form_of_what_they_copy():
    words = corpus_words(default_corpus())
    a, b = copy_exercises(words, 200, seed=1), copy_exercises(words, 200, seed=2)
    assert a != b
    # The copied names appear in another form than in the prompt: one per (escaped) line there, after a space here.
    assert any(("\\n" in p or "\n" in p.split(" ->")[0]) and c.startswith(" ") for p, c in a)
    assert len({c for _, c in a}) > 100


def test_corpus_words_are_frequent_first_and_read_escaped_lines():
    words = corpus_words(["alpha beta beta", "gamma\\ndelta beta alpha"])
    assert words[:2] == ["beta", "alpha"]
    assert "delta" in words and "ndelta" not in words  # "\n" written as an escape is a line break
    with pytest.raises(ValueError, match="at least 8 distinct corpus words"):
        copy_exercises(words, 1)


@settings(max_examples=40, deadline=None)
@given(texts=st.lists(st.text(min_size=0, max_size=900), min_size=1, max_size=5), seed=st.integers(0, 2**31))
def test_text_windows_are_pieces_of_the_texts(texts, seed):
    if not any(len(t) > 16 for t in texts):
        with pytest.raises(ValueError, match="longer than 16 characters"):
            text_windows(texts, 3, seed=seed)
        return
    windows = text_windows(texts, 6, seed=seed)
    assert windows == text_windows(texts, 6, seed=seed)
    for context, continuation in windows:
        assert context and continuation and any(context + continuation in t for t in texts)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("cp") / "m", seed=0, hidden=32, layers=2, heads=4)


def test_pretraining_teaches_the_model_to_read_the_answer_from_the_prompt(tiny):
    """Unseen exercises (another seed), each against its own answer and against another's.

    At random init both losses are equal. After 250 steps the prompt's own answer must be clearly more
    likely than a shuffled one: the model copies from its context, not only the words' frequencies.
    """
    words = corpus_words(default_corpus())
    policy = HFPolicy(tiny, seed=0)
    held = copy_exercises(words, 48, seed=987654)
    answers = [c for _, c in held]
    random.Random(0).shuffle(answers)
    mismatched = [(p, c) for (p, _), c in zip(held, answers, strict=True)]
    judge = SFTTrainer(policy)
    before = judge.evaluate(held), judge.evaluate(mismatched)
    losses = pretrain_copy(policy, words, steps=250, batch_size=16, seed=3)
    after = judge.evaluate(held), judge.evaluate(mismatched)
    assert len(losses) == 250
    assert abs(before[1] - before[0]) < 0.05, before
    assert after[0] < before[0] - 3, (before, after)
    assert after[1] - after[0] > 0.1, after


def test_build_option_pretrains_reproducibly_and_records_how(tmp_path, tiny):
    kw = {"seed": 0, "hidden": 32, "layers": 2, "heads": 4, "copy_pretrain_steps": 5}
    a, b = build_tiny_model(tmp_path / "a", **kw), build_tiny_model(tmp_path / "b", **kw)
    weights = [(d / "model.safetensors").read_bytes() for d in (a, b, tiny)]
    assert weights[0] == weights[1]  # same arguments, same bytes
    assert weights[0] != weights[2]  # and not the random init
    record = json.loads((a / "copy_pretrain.json").read_text())
    assert (
        record["steps"] == 5 and record["words"] > 8 and record["loss_first"] > 0 and record["lm_share"] > 0
    )
    assert not (tiny / "copy_pretrain.json").exists()
    assert HFPolicy(a, max_new_tokens=4).tokenizer.chat_template == HFPolicy(tiny).tokenizer.chat_template
    with pytest.raises(ConfigError, match="copy_pretrain_steps"):
        build_tiny_model(tmp_path / "c", copy_pretrain_steps=-1)


def test_cli_build_takes_the_option_and_refuses_a_negative_count(tmp_path):
    out = tmp_path / "m"
    r = subprocess.run([str(EXE), "model", "build", "--out", str(out), "--hidden", "32", "--copy-pretrain-steps", "3",
                        "--json"], capture_output=True, text=True, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert json.loads((out / "copy_pretrain.json").read_text())["steps"] == 3
    bad = subprocess.run([str(EXE), "model", "build", "--out", str(tmp_path / "n"), "--copy-pretrain-steps", "-1"],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert bad.returncode == 2 and "--copy-pretrain-steps" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1 and not (tmp_path / "n").exists()
