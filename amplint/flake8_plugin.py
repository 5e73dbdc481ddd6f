"""flake8 front end: `flake8 --select AMP` reports what `amplint check` reports.

Registered as the `flake8.extension` entry point `AMP` (pyproject.toml).  The plugin
runs the one engine (`engine.check_source`) with every rule and lets flake8 apply
select/ignore/per-file-ignores/noqa itself; positions go through
`diagnostics.to_flake8`, the only place their base is decided.

Opt-in rules (`default_enabled = False`) run where the file's own `[tool.amplint]`
enables them (each file's, as `amplint check` reads it: not the working directory's;
hostile pass 19 found a monorepo's sub-project reporting AMP001 only when flake8 ran from
its folder), or where an explicit `--select` / `--extend-select` names one (`AMP`,
`AMP5`, `AMP502`), as the same selector does in `amplint check`: `parse_options` reads
the explicit selection and the plugin runs the opt-in rules it names.  The plugin
decides per file, so flake8 needs no default-ignore list for them.

One configuration everywhere: each file is checked with the `[tool.amplint]` of the
pyproject.toml nearest it (select, ignore, extend-select, per-file-ignores,
target-torch), as `amplint check` does, so a rule the project ignores stays quiet in
flake8 too; flake8's own select/ignore/noqa then apply on top.  flake8's `--isolated`
reads no pyproject.toml either.  An invalid `[tool.amplint]`, or a pyproject.toml on
the way up that cannot be read or is not valid TOML, fails the run with the message that
names the key or the file, as it does in the CLI.

This module must stay cheap to import and must never import torch: flake8 loads it
for every run, in every project.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any, ClassVar

from amplint import __version__


# Not a rule: the file was not analysed (amplint's limits).  `amplint check` prints the same
# reason as an error line; flake8 has only codes to say it with.
NOT_ANALYSED = "AMP000"


def _opt_in_codes() -> tuple[str, ...]:
    from amplint.registry import ALL_RULES

    return tuple(sorted(r.code for r in ALL_RULES if not r.default_enabled))


class Flake8Plugin:
    """flake8 picks the plugin kind from `__init__`'s parameter names (`lines`, `filename`)."""

    name = "amplint"
    version = __version__
    # Opt-in codes that a selector the user gave in --select/--extend-select names.
    _enabled_opt_in: ClassVar[frozenset[str]] = frozenset()
    _isolated: ClassVar[bool] = False
    _configs: ClassVar[dict] = {}  # directory -> Config, one pyproject.toml lookup per directory

    def __init__(self, tree: Any, lines: list[str], filename: str) -> None:
        # `tree` is requested so flake8 treats this as a tree plugin (run once per file,
        # after flake8 has checked that the file parses); the engine parses with libcst.
        self._source = "".join(lines)
        self._filename = filename

    @classmethod
    def parse_options(cls, options) -> None:
        named: set[str] = set()
        for attr in ("select", "extend_select"):
            for item in getattr(options, attr, None) or ():
                named |= {c.strip().upper() for c in str(item).split(",") if c.strip()}
        # NB: flake8's selectors are prefixes: `AMP`, `AMP5` and `AMP502` all name AMP502
        cls._enabled_opt_in = frozenset(c for c in _opt_in_codes() if any(c.startswith(s) for s in named))
        # NB: flake8 parses --isolated in a first pass and leaves it False in `options`
        # (flake8/options/parse_args.py), so the command line is asked as well.
        import sys

        cls._isolated = bool(getattr(options, "isolated", False)) or "--isolated" in sys.argv[1:]
        cls._configs = {}

    def _config(self):
        """The file's nearest [tool.amplint], plus the opt-in codes flake8 named in full."""
        import os
        from pathlib import Path

        from amplint.config import defaults_for, find_pyproject, load

        here = Path(os.path.abspath(self._filename)).parent
        config = None if self._isolated else self._configs.get(here)
        if config is None:
            found = None if self._isolated else find_pyproject(here)
            # (no [tool.amplint]: the defaults, with the torch floor of the file's own project)
            config = load(found) if found is not None else defaults_for(here)
            if not self._isolated:
                self._configs[here] = config
        if self._enabled_opt_in:
            config = config.with_overrides(extend_select=config.extend_select + tuple(sorted(self._enabled_opt_in)))
        return config

    def run(self) -> Iterator[tuple[int, int, str, type]]:
        from amplint.diagnostics import to_flake8
        from amplint.engine import SourceError, check_source
        from amplint.sources import undecodable_as_read

        if self._filename.lower().endswith(".ipynb"):
            # flake8 named a notebook (`--filename '*.ipynb'`, or the file itself): its text is
            # the notebook's JSON, which parses as one dict and holds no code to check. A
            # silent pass would read as clean (hostile pass 19); `amplint check` reads cells.
            yield 1, 0, (f"{NOT_ANALYSED} amplint did not analyse this file: flake8 hands plugins a notebook's "
                         f"JSON, not its cells; run `amplint check {os.path.basename(self._filename)}`"), type(self)
            return
        # flake8 reads a file it cannot decode as Latin-1 and checks that text; `amplint
        # check` refuses the file (Python would too): the same verdict here.
        unreadable = undecodable_as_read(self._filename, self._source)
        if unreadable is not None:
            yield 1, 0, f"{NOT_ANALYSED} amplint did not analyse this file: {unreadable}", type(self)
            return
        from amplint.config import ConfigError

        try:
            config = self._config()
        except ConfigError as exc:
            # A mistake in [tool.amplint] must not take flake8 (and every other plugin's
            # findings) down: `amplint check` exits 2 with this message; here it is one
            # finding per file, and the other plugins still report.
            yield 1, 0, f"{NOT_ANALYSED} amplint did not analyse this file: {exc}", type(self)
            return
        crashes: list = []  # a crashing rule must not take flake8 down; the others still report
        try:
            diagnostics = check_source(self._source, self._filename, config, crashes=crashes)
        except SourceError as exc:
            # flake8 runs tree plugins only on files CPython parses, and reports its syntax
            # errors itself (E999).  What amplint still refuses is one of its own limits
            # (size, nesting its parser would crash on): say so, never pass it silently.
            reason = exc.reason.removeprefix("not analysed: ")
            yield exc.line, exc.col0, f"{NOT_ANALYSED} amplint did not analyse this file: {reason}", type(self)
            return
        for d in diagnostics:
            line, col = to_flake8(d.span)
            yield line, col, f"{d.code} {d.message}", type(self)
