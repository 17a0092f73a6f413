"""Task families: generators that turn a seed into many task directories.

A family is anything with a ``name``, a ``version`` and ``generate(n, seed,
out)``; register it in :data:`FAMILIES` and every caller (``sparring tasks
generate``, the demo, tests) can use it through :func:`generate` without other
changes. Generators are stateless: the same (n, seed) writes the same bytes.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from sparring.errors import ConfigError
from sparring.tasks.families.code_repair import CodeRepairGenerator, check_n
from sparring.tasks.families.data_analysis import DataAnalysisGenerator
from sparring.tasks.families.function_impl import FunctionImplGenerator
from sparring.tasks.families.service_recovery import ServiceRecoveryGenerator
from sparring.tasks.families.shell_look import ShellLookGenerator, is_inspection
from sparring.tasks.families.shell_look_deep import ShellLookDeepGenerator
from sparring.tasks.families.shell_ops import ShellOpsGenerator
from sparring.tasks.families.spreadsheet import SpreadsheetGenerator
from sparring.tasks.families.sql import SqlGenerator
from sparring.tasks.families.tool_use import ToolUseGenerator
from sparring.tasks.loader import Task


@runtime_checkable
class FamilyGenerator(Protocol):
    """A task family generator."""

    @property
    def name(self) -> str:
        """The family's name, as ``sparring tasks generate`` takes it."""
        ...

    @property
    def version(self) -> str:
        """The generator's version; bump it whenever its output for a seed changes."""
        ...

    def generate(self, n: int, seed: int, out: Path) -> list[Task]:
        """Write n tasks with distinct ids under out/<task id>/ and return them loaded."""
        ...


FAMILIES: dict[str, FamilyGenerator] = {
    CodeRepairGenerator.name: CodeRepairGenerator(),
    FunctionImplGenerator.name: FunctionImplGenerator(),
    DataAnalysisGenerator.name: DataAnalysisGenerator(),
    ShellOpsGenerator.name: ShellOpsGenerator(),
    ShellLookGenerator.name: ShellLookGenerator(),
    ShellLookDeepGenerator.name: ShellLookDeepGenerator(),
    SpreadsheetGenerator.name: SpreadsheetGenerator(),
    ServiceRecoveryGenerator.name: ServiceRecoveryGenerator(),
    SqlGenerator.name: SqlGenerator(),
    ToolUseGenerator.name: ToolUseGenerator(),
}

# Families that teach looking before acting, and which tool calls count as a look there: the
# recipe reports the per-episode skill measure (sparring.monitor.skill) for these.
INSPECTIONS: dict[str, Callable[[str, dict[str, Any] | None], bool]] = {
    ShellLookGenerator.name: is_inspection,
    ShellLookDeepGenerator.name: is_inspection,
}


def get_family(family: str) -> FamilyGenerator:
    """The registered generator of a family; ConfigError naming the known ones otherwise."""
    try:
        return FAMILIES[family]
    except KeyError:
        known = ", ".join(sorted(FAMILIES))
        raise ConfigError(f"unknown family {family!r} (known: {known})") from None


def generate(family: str, n: int, seed: int, out: Path) -> list[Task]:
    """Generate n tasks of a family from seed into out/; ConfigError for an unknown family or bad n."""
    generator = get_family(family)
    check_n(n)
    return generator.generate(n, seed, Path(out))


__all__ = ["FAMILIES", "INSPECTIONS", "FamilyGenerator", "generate", "get_family"]
