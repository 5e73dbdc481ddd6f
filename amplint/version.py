"""amplint's version, in a module of its own: the package's `__init__` reaches the engine and
the runner (its `check_source` and `check_paths`), so a module they import (the cache keys its
entries by the version) takes the version from here, not from the package."""

__version__ = "0.1.0"
