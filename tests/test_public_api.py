"""`import sparring` offers the curated names a user needs, each documented, loaded on first use."""

from __future__ import annotations

import subprocess
import sys

import sparring


def test_every_public_name_resolves_and_is_documented():
    names = [n for n in sparring.__all__ if n != "__version__"]
    assert 15 <= len(names) <= 25
    for name in names:
        obj = getattr(sparring, name)
        assert obj.__doc__ and obj.__doc__.strip(), f"{name} has no docstring"
        assert f":class:`{name}`" in sparring.__doc__ or f":func:`{name}`" in sparring.__doc__, name


def test_an_unknown_name_is_an_attribute_error():
    try:
        sparring.NoSuchThing  # noqa: B018
    except AttributeError as e:
        assert "NoSuchThing" in str(e)
    else:
        raise AssertionError("an unknown name resolved")


def test_import_sparring_loads_neither_torch_nor_the_sandbox():
    code = (
        "import sys, sparring; "
        "print(sorted(m for m in ('torch', 'sparring.sandbox.local.backend', 'sparring.env') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]"
    # positive control: touching a name does load its room
    code2 = "import sys, sparring; sparring.Environment; print('sparring.env' in sys.modules)"
    out2 = subprocess.run(
        [sys.executable, "-c", code2], capture_output=True, text=True, check=True, timeout=120
    )
    assert out2.stdout.strip() == "True"
