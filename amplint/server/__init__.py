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


import sys

HEADER = b"Content-Length:"


def serve() -> None:
    """Run the server on stdin/stdout until the client sends `exit`."""
    from amplint.server.app import build

    build().start_io(stdin=Resynchronising(sys.stdin.buffer))


class Resynchronising:
    """stdin for pygls's reader, which finds the next message again after a bad one.

    pygls reads a header line by line, then exactly Content-Length bytes of body.  When a
    Content-Length is shorter than its body, the rest of the body (no newline at its end) and
    the next message's `Content-Length: N` header arrive as one line, which pygls does not take
    for a header: it never answers again.  Here such a line is cut to its header, and stderr
    (the client's log of the server) says what was skipped.  A message that announced more
    than it sent cannot be told from a slow one: that one waits, as the protocol says.
    """

    def __init__(self, raw) -> None:
        self._raw = raw

    def read(self, n: int = -1) -> bytes:
        return self._raw.read(n)

    def readline(self) -> bytes:
        line = self._raw.readline()
        at = line.find(HEADER)
        if at > 0:
            sys.stderr.write(f"amplint server: skipped {at} bytes before a header, not part of any message "
                             f"(a Content-Length shorter than its body?)\n")
            sys.stderr.flush()
            return line[at:]
        return line
