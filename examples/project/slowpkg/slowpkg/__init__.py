"""A small package whose two functions are slow on purpose (the maxcode project example)."""

from slowpkg.common import count_common, first_shared
from slowpkg.paths import grid_paths

__all__ = ["count_common", "first_shared", "grid_paths"]
