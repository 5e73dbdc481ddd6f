"""amplint verify: loaded at interpreter start in every Python process of the verified command.

It first chains to the `sitecustomize` this one shadows (so a site's own customisation still runs),
then starts amplint's bootstrap.  Nothing happens unless AMPLINT_ACTIVE=1.
"""
import importlib
import os
import sys


def _chain() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    mine = sys.modules.pop("sitecustomize", None)
    saved = list(sys.path)
    try:
        sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
        importlib.import_module("sitecustomize")
    except ImportError:
        pass
    except Exception as exc:  # the shadowed one failed: say so, as Python would have
        print(f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n{type(exc).__name__}: {exc}", file=sys.stderr)
    finally:
        sys.path[:] = saved
        if mine is not None:
            sys.modules["sitecustomize"] = mine


def _start() -> None:
    if os.environ.get("AMPLINT_ACTIVE") != "1":
        return
    try:
        import amplint  # noqa: F401
    except ImportError:
        home = os.environ.get("AMPLINT_HOME")
        if home:
            sys.path.append(home)
    try:
        from amplint.runtime import bootstrap
    except ImportError as exc:
        print(f"amplint verify: cannot load the bootstrap here: {exc}", file=sys.stderr)
        return
    bootstrap.start()


_chain()
_start()
