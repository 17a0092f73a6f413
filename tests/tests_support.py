"""Constants shared by tests (importable because tests/ is on sys.path via rootdir conftest)."""

from conftest import FIXED as FIXED_CLAMP

__all__ = ["FIXED_CLAMP"]
