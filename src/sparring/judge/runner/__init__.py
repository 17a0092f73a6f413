"""Running the judge's checks in sandboxes, on the HOST.

- :mod:`.sandbox`: one judgement's sandbox runs (reference phase, the candidate's diff, the launcher
  and the driver, from the read-only ``/judge/cfg`` staged from :mod:`sparring.judge.inside`) and the
  warm :class:`~sparring.judge.runner.sandbox.JudgePool`;
- :mod:`.batch`: judging a batch of workspaces (which diff each task gets, canaries, the review queue).
"""
