"""`amplint server`: a Language Server (LSP over stdio) running the same engine as the CLI.

Built on pygls (`pip install 'amplint[server]'`), as Fixit's `fixit lsp` is.  What it does:

- publishes diagnostics for each open Python buffer on open, change and save, from the
  unsaved text (`engine.check_source`, the CLI's entry point: the same findings, the
  same `[tool.amplint]` of the nearest pyproject.toml, per-file-ignores and excludes
  included), with exact ranges (in the position encoding the client negotiated) and a
  link to the rule's page;
- offers code actions: the rule's fix where it has one (`quickfix`; safe ones preferred),
  "suppress with `# noqa: AMPnnn`", and `source.fixAll.amplint` (every safe fix).

Notebook documents (LSP 3.17 `notebookDocument/*`) are not served: `amplint check` reads
.ipynb files.  The modules are split by job: `app.py` wires the protocol, `convert.py`
turns amplint's diagnostics and edits into LSP's, `configs.py` finds each file's config.
"""

from __future__ import annotations


def serve() -> None:
    """Run the server on stdin/stdout until the client sends `exit`."""
    from amplint.server.app import build

    build().start_io()
