"""``sparring doctor``: what this host gives Sparring, and what falls back where it does not."""

from sparring.doctor.checks import SCHEMA, Check, report, run_checks, sandbox_degradations

__all__ = ["SCHEMA", "Check", "report", "run_checks", "sandbox_degradations"]
