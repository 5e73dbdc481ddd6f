"""What the new surfaces cost next to the plain engine call, measured side by side (issue 16).

  notebook   `notebooks.check` of a notebook whose code cells hold a module, next to
             `check_source` of the same module as a .py text (the joined-module cost:
             JSON parse, magic neutralising, mapping findings back to cells)
  server     didChange -> publishDiagnostics round trip through `amplint server` over
             stdio (pygls's client), next to `check_source` of the same text in-process
             (what the protocol, framing and conversion add per keystroke)
  fix-nb     `--fix` of the notebook (fix loop + write-back + nbformat validation), next
             to fixing the same module text

Run:  python benchmarks/bench_surfaces.py [FILE.py] [--rounds N]
      (default FILE: examples/train_legacy_amp_trainer.py, split into cells of 15 lines)
Not a test: nothing asserts a time; paste the table into BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from amplint import notebooks  # noqa: E402
from amplint.engine import check_source  # noqa: E402
from amplint.fixes import fix_text  # noqa: E402


def _notebook(text: str, lines_per_cell: int) -> str:
    import nbformat

    lines = text.splitlines(keepends=True)
    nb = nbformat.v4.new_notebook()
    # cut only before a top-level line, so every cell is a complete block
    cell: list[str] = []
    for line in lines:
        if len(cell) >= lines_per_cell and line[:1] not in (" ", "\t", "\n", ")", "]", "}", "#", ""):
            nb.cells.append(nbformat.v4.new_code_cell("".join(cell)))
            cell = []
        cell.append(line)
    nb.cells.append(nbformat.v4.new_code_cell("".join(cell)))
    return nbformat.writes(nb)


def _best(fn, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times) * 1000, statistics.median(times) * 1000


async def _server_round_trips(path: Path, text: str, rounds: int) -> list[float]:
    from lsprotocol import types
    from pygls.lsp.client import LanguageClient

    client = LanguageClient("bench", "0")
    queue: asyncio.Queue = asyncio.Queue()
    client.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)(lambda params: queue.put_nowait(params))
    await client.start_io(sys.executable, "-m", "amplint", "server")
    await client.initialize_async(types.InitializeParams(capabilities=types.ClientCapabilities()))
    client.initialized(types.InitializedParams())
    uri = path.resolve().as_uri()
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        text_document=types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)))
    await queue.get()
    times = []
    for version in range(2, rounds + 2):
        edit = text + f"\nx_{version} = {version}\n"
        t = time.perf_counter()
        client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=edit)]))
        await queue.get()
        times.append(time.perf_counter() - t)
    await client.shutdown_async(None)
    client.exit(None)
    await client.stop()
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("file", nargs="?", type=Path, default=ROOT / "examples" / "train_legacy_amp_trainer.py")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--lines-per-cell", type=int, default=15)
    args = parser.parse_args()
    text = args.file.read_text()
    nb_text = _notebook(text, args.lines_per_cell)
    nb = notebooks.load(nb_text, "bench.ipynb")
    path = str(args.file)

    def lint_py():
        return check_source(text, path)

    def lint_nb():
        return notebooks.check(notebooks.load(nb_text, "bench.ipynb"), lambda t: check_source(t, "bench.ipynb"))

    found_py, found_nb = len(lint_py()), len(lint_nb())
    assert found_py == found_nb, (found_py, found_nb)
    rows = [("check .py (engine)", *_best(lint_py, args.rounds)), ("check .ipynb", *_best(lint_nb, args.rounds))]
    rows.append(("fix .py text", *_best(lambda: fix_text(text, lambda t: check_source(t, path), unsafe=True), args.rounds)))
    rows.append(("fix .ipynb", *_best(lambda: notebooks.fix(notebooks.load(nb_text, "bench.ipynb"),
                                                             lambda t: check_source(t, "bench.ipynb"), unsafe=True),
                                       args.rounds)))
    server = asyncio.run(_server_round_trips(args.file, text, args.rounds))
    rows.append(("server didChange->publish", min(server) * 1000, statistics.median(server) * 1000))
    print(f"{args.file.name}: {len(text.splitlines())} lines, {len(nb.cells)} cells, {found_py} findings, {args.rounds} rounds")
    print(f"{'what':<28}{'best ms':>10}{'median ms':>12}")
    for name, best, median in rows:
        print(f"{name:<28}{best:>10.1f}{median:>12.1f}")
    print(f"ratios (median): notebook/py check {rows[1][2] / rows[0][2]:.2f}x, notebook/py fix {rows[3][2] / rows[2][2]:.2f}x, "
          f"server round trip/engine {rows[4][2] / rows[0][2]:.2f}x")


if __name__ == "__main__":
    main()
