"""How the judge's tests and inputs are prepared for the sandbox, on the HOST.

- :mod:`.probe`: the judge's tests rewritten into probes, so the candidate's process only observes
  and never holds an expected value;
- :mod:`.skeleton`: the host's half of an ``expr`` site (constants it may evaluate, an assert's leaves);
- :mod:`.inputs`: dynamically generated tests, fresh seeded inputs compared with the reference;
- :mod:`.mutation`: type-aware mutation of seed inputs for them.

What runs in the sandbox with these is in :mod:`sparring.judge.inside`.
"""
