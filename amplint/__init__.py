"""amplint: find and prove the mistakes that make mixed-precision PyTorch training silently wrong.

The static half (`check`) never imports torch; `amplint.runtime` is the only package
that does.
"""

from amplint.version import __version__ as __version__  # re-exported: `amplint.__version__`


def check_source(source, path="<string>", config=None, **kwargs):
    """Diagnostics for one module's source text (see `amplint.engine.check_source`)."""
    from amplint.engine import check_source as _check

    return _check(source, path, config, **kwargs)


def check_paths(paths, config=None, **kwargs):
    """Check files and directories on disk (see `amplint.runner.check_paths`)."""
    from pathlib import Path

    from amplint.config import discover
    from amplint.runner import check_paths as _check_paths

    paths = [Path(p) for p in paths]
    return _check_paths(paths, config or discover(paths), **kwargs)
