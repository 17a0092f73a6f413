"""Static checks on the agent's diff, on the HOST (nothing of the candidate is executed here).

- :mod:`.hacks`: hack detection, the named flags that zero or cap the reward;
- :mod:`.aliases`: what a name can refer to through imports and assignments (used by the detectors);
- :mod:`.importable`: non-source importables (extension modules, bytecode, ``.pth``) taken out of the diff;
- :mod:`.components`: the static and maintainability reward components (ruff, size of the change).
"""
