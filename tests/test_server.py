"""`amplint server`, driven by a real LSP client (pygls's) over the server's stdin/stdout.

One server process per test module: initialize once, then each test opens its own
buffer; the last test shuts it down and checks that `exit` ends the process cleanly.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

pytest.importorskip("pygls")
from lsprotocol import types  # noqa: E402
from pygls.lsp.client import LanguageClient  # noqa: E402

from amplint.positions import split_lines  # noqa: E402

TRAIN = """\
import torch

model = torch.nn.Linear(4, 4)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.cuda.amp.GradScaler()
for _ in range(2):
    with torch.autocast("cpu", dtype=torch.float16):
        loss = model(torch.randn(2, 4)).sum()
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
"""
TIMEOUT = 60


def preview_project(folder: Path) -> Path:
    """TRAIN clips before unscale_ (AMP101), a preview rule: the server runs it for the files of a
    project whose [tool.amplint] says `preview = true`, as the CLI does."""
    (folder / "pyproject.toml").write_text("[tool.amplint]\npreview = true\n")
    return folder


class Session:
    """A client, the server it started, and the diagnostics published per document."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.client = LanguageClient("amplint-tests", "0")
        self.published: dict[str, asyncio.Queue] = {}
        self.messages: list[str] = []

        @self.client.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
        def on_diagnostics(params: types.PublishDiagnosticsParams) -> None:
            self._queue(params.uri).put_nowait(params)

        @self.client.feature(types.WINDOW_SHOW_MESSAGE)
        def on_message(params: types.ShowMessageParams) -> None:
            self.messages.append(params.message)

    def _queue(self, uri: str) -> asyncio.Queue:
        return self.published.setdefault(uri, asyncio.Queue())

    def run(self, coro):
        return self.loop.run_until_complete(asyncio.wait_for(coro, TIMEOUT))

    def diagnostics(self, uri: str) -> list[types.Diagnostic]:
        """The next diagnostics published for `uri` (each open/change publishes once)."""
        return self.run(self._queue(uri).get()).diagnostics

    def open(self, path: Path, text: str, language: str = "python") -> str:
        uri = path.as_uri()
        self.client.text_document_did_open(types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri=uri, language_id=language, version=1, text=text)))
        return uri

    def code_actions(self, uri: str, rng: types.Range, only=None) -> list[types.CodeAction]:
        params = types.CodeActionParams(text_document=types.TextDocumentIdentifier(uri=uri), range=rng,
                                        context=types.CodeActionContext(diagnostics=[], only=only))
        return self.run(self.client.text_document_code_action_async(params)) or []


@pytest.fixture(scope="module")
def session():
    s = Session()
    s.run(s.client.start_io(sys.executable, "-m", "amplint", "server"))
    s.result = s.run(s.client.initialize_async(types.InitializeParams(
        capabilities=types.ClientCapabilities(), process_id=None, root_uri=None)))
    s.client.initialized(types.InitializedParams())
    yield s
    if not s.client.stopped:
        s.run(s.client.shutdown_async(None))
        s.client.exit(None)
        s.run(s.client.stop())
    s.loop.close()


def apply(text: str, edits: list[types.TextEdit]) -> str:
    """Apply LSP text edits (UTF-16 columns, as negotiated by default) to `text`; lines end
    at \n, \r\n or \r only, as the LSP specification says."""
    lines = split_lines(text)

    def offset(p: types.Position) -> int:
        if p.line >= len(lines):
            return len(text)
        line = lines[p.line]
        units = 0
        for i, ch in enumerate(line):
            if units >= p.character:
                return sum(map(len, lines[: p.line])) + i
            units += 2 if ord(ch) > 0xFFFF else 1
        return sum(map(len, lines[: p.line])) + len(line)

    for e in sorted(edits, key=lambda e: (e.range.start.line, e.range.start.character), reverse=True):
        text = text[: offset(e.range.start)] + e.new_text + text[offset(e.range.end):]
        lines = split_lines(text)
    return text


def rng(line: int, start: int, end: int | None = None) -> types.Range:
    return types.Range(start=types.Position(line=line, character=start),
                       end=types.Position(line=line, character=start if end is None else end))


def test_initialize_announces_sync_and_code_actions(session) -> None:
    caps = session.result.capabilities
    assert session.result.server_info.name == "amplint"
    assert caps.text_document_sync.change == types.TextDocumentSyncKind.Incremental
    assert set(caps.code_action_provider.code_action_kinds) == {"quickfix", "source.fixAll.amplint"}


def test_open_publishes_exact_ranges_and_no_dead_link(session, tmp_path: Path) -> None:
    path = preview_project(tmp_path) / "train.py"
    path.write_text("# on disk: something else\n")  # the buffer is unsaved: its text is what counts
    uri = session.open(path, TRAIN)
    found = sorted(session.diagnostics(uri), key=lambda d: d.range.start.line)
    assert [(d.code, d.range.start.line, d.range.start.character, d.range.end.character) for d in found] == [
        ("AMP401", 4, 9, 34), ("AMP101", 9, 4, 59)]
    assert found[0].source == "amplint" and found[0].severity == types.DiagnosticSeverity.Warning
    assert found[0].code_description is None  # no public home yet: no dead link


def test_code_actions_fix_suppress_and_fix_all(session, tmp_path: Path) -> None:
    uri = session.open(preview_project(tmp_path) / "train.py", TRAIN)
    session.diagnostics(uri)
    actions = session.code_actions(uri, rng(4, 12))  # the cursor inside `torch.cuda.amp.GradScaler`
    titles = [a.title for a in actions]
    # a GradScaler's AMP401 fix is unsafe (the class it builds is another): offered, marked, not preferred
    assert titles == ['AMP401: Use `torch.amp.GradScaler("cuda")` (unsafe)', "AMP401: Suppress with `# noqa: AMP401`"]
    fix, suppress = actions
    assert fix.kind == types.CodeActionKind.QuickFix and not fix.is_preferred and fix.diagnostics[0].code == "AMP401"
    assert 'scaler = torch.amp.GradScaler("cuda")\n' in apply(TRAIN, fix.edit.changes[uri])
    assert "scaler = torch.cuda.amp.GradScaler()  # noqa: AMP401\n" in apply(TRAIN, suppress.edit.changes[uri])
    # AMP101's fix is unsafe too; neither is part of fix-all
    (clip_fix, _) = session.code_actions(uri, rng(9, 4), only=["quickfix"])
    assert clip_fix.title.endswith("(unsafe)") and not clip_fix.is_preferred
    assert session.code_actions(uri, rng(0, 0), only=["source.fixAll"]) == []
    # a legacy autocast call has a safe fix: preferred, and what fix-all applies
    text = TRAIN.replace("torch.cuda.amp.GradScaler()", 'torch.amp.GradScaler("cuda")').replace(
        'torch.autocast("cpu", dtype=torch.float16)', "torch.cuda.amp.autocast()")
    uri = session.open(tmp_path / "project" / "safe.py", text)
    session.diagnostics(uri)
    (fix, _) = session.code_actions(uri, rng(6, 14), only=["quickfix"])
    assert fix.is_preferred and not fix.title.endswith("(unsafe)")
    (fix_all,) = session.code_actions(uri, rng(0, 0), only=["source.fixAll"])
    assert fix_all.kind == "source.fixAll.amplint"
    fixed = apply(text, fix_all.edit.changes[uri])
    assert "torch.cuda.amp" not in fixed and "unscale_" not in fixed
    assert len(fix_all.edit.changes[uri]) == 1  # one line changed, not the whole buffer replaced


def test_did_change_rechecks_the_unsaved_text(session, tmp_path: Path) -> None:
    uri = session.open(preview_project(tmp_path) / "train.py", TRAIN)
    assert {d.code for d in session.diagnostics(uri)} == {"AMP401", "AMP101"}
    change = types.TextDocumentContentChangePartial(range=rng(4, 9, 34), text='torch.amp.GradScaler("cuda")')
    session.client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2), content_changes=[change]))
    assert {d.code for d in session.diagnostics(uri)} == {"AMP101"}
    # a buffer that does not parse (yet) says why, once, instead of a stale list
    broken = types.TextDocumentContentChangeWholeDocument(text="def f(:\n")
    session.client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=3), content_changes=[broken]))
    (error,) = session.diagnostics(uri)
    assert error.severity == types.DiagnosticSeverity.Error and "SyntaxError" in error.message and error.code is None


def test_changes_typed_in_a_burst_are_checked_once_at_their_last_version(session, tmp_path: Path) -> None:
    """Each keystroke's version was checked in turn: on a module that takes seconds to check,
    the screen lagged the text by tens of seconds (hostile pass 16). A burst of changes is
    checked once, after the pause, at the version on screen."""
    uri = session.open(preview_project(tmp_path) / "train.py", TRAIN)
    session.diagnostics(uri)
    for version in range(2, 12):
        change = types.TextDocumentContentChangeWholeDocument(text=TRAIN + "#" * version + "\n")
        session.client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version), content_changes=[change]))
    published = session.run(session._queue(uri).get())
    assert published.version == 11
    session.run(asyncio.sleep(1.0))  # nothing else is on its way
    assert session._queue(uri).empty()


def test_code_actions_asked_inside_the_pause_are_built_on_the_text_on_screen(session, tmp_path: Path) -> None:
    """A line typed above a finding, then a quick fix asked for before the pause ended: the
    edits of the last check were placed on the new text and corrupted it (hostile pass 19)."""
    uri = session.open(preview_project(tmp_path) / "train.py", TRAIN)
    session.diagnostics(uri)
    text = TRAIN.replace("import torch\n", "import torch\nx = torch.ones(3)  # inputs\n", 1)
    session.client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
        content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)]))
    actions = session.code_actions(uri, rng(5, 12), only=["quickfix"])  # the scaler's line, one lower now
    fix = next(a for a in actions if "Use" in a.title)
    fixed = apply(text, fix.edit.changes[uri])
    assert 'scaler = torch.amp.GradScaler("cuda")\n' in fixed and "x = torch.ones(3)  # inputs\n" in fixed


def test_a_document_closed_inside_the_pause_gets_no_late_diagnostics(session, tmp_path: Path) -> None:
    path = preview_project(tmp_path) / "train.py"
    path.write_text(TRAIN)
    uri = session.open(path, TRAIN)
    session.diagnostics(uri)
    session.client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
        content_changes=[types.TextDocumentContentChangeWholeDocument(text=TRAIN + "\n")]))
    session.client.text_document_did_close(types.DidCloseTextDocumentParams(
        text_document=types.TextDocumentIdentifier(uri=uri)))
    assert not session.diagnostics(uri)  # the close clears them
    session.run(asyncio.sleep(1.0))
    assert session._queue(uri).empty()  # and nothing publishes them again


def test_tool_amplint_is_read_like_the_cli(session, tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[tool.amplint]\npreview = true\nignore = ["AMP101"]\nper-file-ignores = { "tests/*" = ["AMP401"] }\nextend-exclude = ["vendor/"]\n')
    assert [d.code for d in session.diagnostics(session.open(tmp_path / "train.py", TRAIN))] == ["AMP401"]
    (tmp_path / "tests").mkdir()
    assert list(session.diagnostics(session.open(tmp_path / "tests" / "test_x.py", TRAIN))) == []
    (tmp_path / "vendor").mkdir()
    assert list(session.diagnostics(session.open(tmp_path / "vendor" / "v.py", TRAIN))) == []


def test_a_pyproject_that_loses_its_table_hands_over_to_the_parents(session, tmp_path: Path) -> None:
    """Without a file event from the editor: the nearer pyproject.toml is edited and no longer
    has [tool.amplint], so the parent's applies at the next keystroke (hostile pass 23)."""
    import os
    import time

    (tmp_path / "pyproject.toml").write_text('[tool.amplint]\nignore = ["AMP401"]\n')
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "pyproject.toml").write_text("[tool.amplint]\n")
    uri = session.open(sub / "t.py", TRAIN)
    assert "AMP401" in [d.code for d in session.diagnostics(uri)]
    (sub / "pyproject.toml").write_text('[project]\nname = "sub"\n')
    later = time.time() + 5
    os.utime(sub / "pyproject.toml", (later, later))
    session.client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
        content_changes=[types.TextDocumentContentChangeWholeDocument(text=TRAIN + "\n")]))
    assert "AMP401" not in [d.code for d in session.diagnostics(uri)]


def test_an_invalid_configuration_is_shown_not_swallowed(session, tmp_path: Path) -> None:
    """A message once, and on every file one error saying it was not analysed: an empty list
    would show the files as clean, where `amplint check` exits 2 (hostile pass 14)."""
    (tmp_path / "pyproject.toml").write_text('[tool.amplint]\nselec = ["AMP1"]\n')
    for name in ("t.py", "u.py"):
        (error,) = session.diagnostics(session.open(tmp_path / name, TRAIN))
        assert error.severity == types.DiagnosticSeverity.Error and error.range.start.line == 0
        assert error.message.startswith("amplint did not analyse this file: ") and "selec" in error.message
    session.run(asyncio.sleep(0.2))
    assert any("unknown [tool.amplint] key(s): selec" in m for m in session.messages)


def test_a_file_created_on_disk_is_seen_when_a_buffer_is_saved(session, tmp_path: Path) -> None:
    """The project's listing and import resolution are read again on save: a new caller of a
    helper, created on disk while the server runs, makes its finding (hostile pass 14)."""
    (tmp_path / "pyproject.toml").write_text("[tool.amplint]\n")
    engine = tmp_path / "engine.py"
    text = ("import torch\n\n\ndef train_one_epoch(model, data):\n    scaler = torch.amp.GradScaler('cuda')\n"
            "    for x in data:\n        with torch.autocast('cuda'):\n            loss = model(x).sum()\n"
            "        scaler.scale(loss).backward()\n")
    engine.write_text(text)
    uri = session.open(engine, text)
    assert [d.code for d in session.diagnostics(uri)] == []
    (tmp_path / "train.py").write_text(
        "from engine import train_one_epoch\n\nfor epoch in range(3):\n    train_one_epoch(model, data)\n")
    session.client.text_document_did_save(types.DidSaveTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri)))
    assert "AMP105" in [d.code for d in session.diagnostics(uri)]


def _engine(folder: Path) -> tuple[Path, str]:
    (folder / "pyproject.toml").write_text("[tool.amplint]\n")
    engine = folder / "engine.py"
    text = ("import torch\n\n\ndef train_one_epoch(model, data):\n    scaler = torch.amp.GradScaler('cuda')\n"
            "    for x in data:\n        with torch.autocast('cuda'):\n            loss = model(x).sum()\n"
            "        scaler.scale(loss).backward()\n")
    engine.write_text(text)
    return engine, text


def test_a_file_created_on_disk_is_seen_when_the_editor_reports_it(session, tmp_path: Path) -> None:
    """A `git pull` adds a caller without any buffer being saved: the editor's
    workspace/didChangeWatchedFiles re-checks the open buffers (hostile pass 21)."""
    engine, text = _engine(tmp_path)
    uri = session.open(engine, text)
    assert [d.code for d in session.diagnostics(uri)] == []
    train = tmp_path / "train.py"
    train.write_text("from engine import train_one_epoch\n\nfor epoch in range(3):\n    train_one_epoch(model, data)\n")
    session.client.workspace_did_change_watched_files(types.DidChangeWatchedFilesParams(
        changes=[types.FileEvent(uri=train.as_uri(), type=types.FileChangeType.Created)]))
    assert "AMP105" in [d.code for d in session.diagnostics(uri)]


def test_saving_one_buffer_rechecks_the_others_that_depend_on_it(session, tmp_path: Path) -> None:
    """The loop that made engine.py's AMP105 is removed from train.py and saved: engine.py's
    finding went stale until the user typed in it (hostile pass 21)."""
    engine, text = _engine(tmp_path)
    train = tmp_path / "train.py"
    looped = "from engine import train_one_epoch\n\nfor epoch in range(3):\n    train_one_epoch(model, data)\n"
    train.write_text(looped)
    engine_uri = session.open(engine, text)
    assert "AMP105" in [d.code for d in session.diagnostics(engine_uri)]
    train_uri = session.open(train, looped)
    session.diagnostics(train_uri)
    once = "from engine import train_one_epoch\n\ntrain_one_epoch(model, data)\n"
    train.write_text(once)
    session.client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=train_uri, version=2),
        content_changes=[types.TextDocumentContentChangeWholeDocument(text=once)]))
    session.client.text_document_did_save(types.DidSaveTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=train_uri)))
    while True:  # the last publish for engine.py after the save
        published = session.diagnostics(engine_uri)
        if session._queue(engine_uri).empty():
            break
    assert "AMP105" not in [d.code for d in published]


def test_saves_in_a_burst_recheck_the_other_buffers_once(session, tmp_path: Path) -> None:
    """Autosave: five saves of one buffer re-check it each time, and the other open buffers once,
    after the burst (hostile pass 23: every save re-checked every buffer in turn, blocking)."""
    saved = session.open(tmp_path / "saved.py", TRAIN)
    others = [session.open(tmp_path / f"other{i}.py", TRAIN) for i in range(3)]
    for uri in (saved, *others):
        session.diagnostics(uri)
    for _ in range(5):
        session.client.text_document_did_save(types.DidSaveTextDocumentParams(
            text_document=types.TextDocumentIdentifier(uri=saved)))
    session.run(asyncio.sleep(1.5))
    assert session._queue(saved).qsize() == 5
    assert [session._queue(uri).qsize() for uri in others] == [1, 1, 1]
    for uri in (saved, *others):
        while not session._queue(uri).empty():
            session._queue(uri).get_nowait()


def test_columns_are_utf16_units_after_astral_characters(session, tmp_path: Path) -> None:
    text = 'import torch\ns = "🔥"; t = torch.cuda.amp.GradScaler()\n'
    (d,) = session.diagnostics(session.open(tmp_path / "emoji.py", text))
    # the emoji is one code point (libcst's column 13) but two UTF-16 units
    assert (d.range.start.line, d.range.start.character) == (1, 14)
    uri = (tmp_path / "emoji.py").as_uri()
    (fix, _) = session.code_actions(uri, d.range, only=["quickfix"])
    assert apply(text, fix.edit.changes[uri]) == 'import torch\ns = "🔥"; t = torch.amp.GradScaler("cuda")\n'



@pytest.mark.parametrize("separator", ["\x0c", "\u2028", "\x1c", "\x85", "\x0b"])
def test_fix_all_lands_on_the_finding_after_a_character_splitlines_breaks_at(session, tmp_path: Path,
                                                                             separator: str) -> None:
    """A form feed or \u2028 ends no line in LSP: fix-all counted one and replaced the line
    after the finding's (past the end here), leaving the deprecated call and adding a copy."""
    text = f"import torch\n# page{separator}break\nx = 1\nwith torch.cuda.amp.autocast(): pass\ny = 2\n"
    uri = session.open(tmp_path / "ff.py", text)
    session.diagnostics(uri)
    (fix_all,) = session.code_actions(uri, rng(0, 0), only=["source.fixAll"])
    (edit,) = fix_all.edit.changes[uri]
    assert (edit.range.start.line, edit.range.end.line) == (3, 4)
    assert apply(text, [edit]) == text.replace("torch.cuda.amp.autocast()", 'torch.autocast("cuda", dtype=torch.float16, cache_enabled=True)')


def test_other_languages_and_notebook_cells_are_left_alone(session, tmp_path: Path) -> None:
    assert list(session.diagnostics(session.open(tmp_path / "notes.md", TRAIN, language="markdown"))) == []
    # a notebook cell alone is not a module; an untitled buffer is checked with the defaults,
    # which leave out the preview tier (AMP101)
    cell = "vscode-notebook-cell:" + (tmp_path / "nb.ipynb").as_posix() + "#W0sZmlsZQ=="
    session.client.text_document_did_open(types.DidOpenTextDocumentParams(
        text_document=types.TextDocumentItem(uri=cell, language_id="python", version=1, text=TRAIN)))
    assert list(session.diagnostics(cell)) == []
    untitled = "untitled:Untitled-1"
    session.client.text_document_did_open(types.DidOpenTextDocumentParams(
        text_document=types.TextDocumentItem(uri=untitled, language_id="python", version=1, text=TRAIN)))
    assert {d.code for d in session.diagnostics(untitled)} == {"AMP401"}


def test_the_projects_torch_floor_holds_in_the_editor_without_a_tool_amplint_table(session, tmp_path: Path) -> None:
    """No [tool.amplint], `torch>=2.1` in [project]: "fix all" must not write what needs torch 2.4
    (hostile pass 23: editors run it on save)."""
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "p"\ndependencies = ["torch>=2.1"]\n')
    text = "import torch\n\n@torch.cuda.amp.custom_fwd\ndef f(ctx, x):\n    return x\n"
    uri = session.open(tmp_path / "t.py", text)
    (diagnostic,) = session.diagnostics(uri)
    assert "needs torch 2.4, target-torch is 2.1" in diagnostic.message
    titles = [a.title for a in session.code_actions(uri, rng(2, 0, 26))]
    assert titles and not [t for t in titles if "noqa" not in t], titles


def test_a_never_saved_buffer_takes_the_workspace_folders_configuration(tmp_path: Path) -> None:
    """`untitled:` buffers use the [tool.amplint] of the workspace folder, as `amplint check -`
    run there does (hostile pass 21: they used the defaults)."""
    (tmp_path / "pyproject.toml").write_text('[tool.amplint]\nignore = ["AMP401"]\n')
    s = Session()
    try:
        s.run(s.client.start_io(sys.executable, "-m", "amplint", "server"))
        s.run(s.client.initialize_async(types.InitializeParams(
            capabilities=types.ClientCapabilities(), process_id=None, root_uri=tmp_path.as_uri(),
            workspace_folders=[types.WorkspaceFolder(uri=tmp_path.as_uri(), name="w")])))
        s.client.initialized(types.InitializedParams())
        uri = "untitled:Untitled-1"
        s.client.text_document_did_open(types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri=uri, language_id="python", version=1, text=TRAIN)))
        assert "AMP401" not in [d.code for d in s.diagnostics(uri)]
    finally:
        if not s.client.stopped:
            s.run(s.client.shutdown_async(None))
            s.client.exit(None)
            s.run(s.client.stop())
        s.loop.close()


def test_shutdown_and_exit_end_the_process(session) -> None:
    session.run(session.client.shutdown_async(None))
    session.client.exit(None)
    session.run(session.client.stop())
    assert session.client._server.returncode == 0


# --- framing: a bad message costs that message, not the session ------------------------------


class _RawServer:
    """`amplint server` over pipes, framed by hand: what a buggy client sends, exactly."""

    def __init__(self) -> None:
        import os
        import queue
        import subprocess
        import threading

        root = Path(__file__).resolve().parent.parent
        self.proc = subprocess.Popen([sys.executable, "-m", "amplint", "server"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env={**os.environ, "PYTHONPATH": str(root)})
        self.replies: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        import json

        out = self.proc.stdout
        while True:
            length = None
            while True:
                line = out.readline()
                if not line:
                    return
                if line.startswith(b"Content-Length:"):
                    length = int(line.split(b":")[1])
                if line == b"\r\n" and length is not None:
                    break
            message = json.loads(out.read(length))
            if "id" in message and "method" not in message:
                self.replies.put(message)

    def send(self, body: bytes, length: int | None = None) -> None:
        header = b"" if length is False else b"Content-Length: %d\r\n\r\n" % (len(body) if length is None else length)
        self.proc.stdin.write(header + body)
        self.proc.stdin.flush()

    def request(self, id_: int, method: str, params: dict) -> bytes:
        import json

        return json.dumps({"jsonrpc": "2.0", "id": id_, "method": method, "params": params}).encode()

    def reply(self, timeout: float = TIMEOUT) -> dict:
        return self.replies.get(timeout=timeout)


def test_the_server_answers_again_after_a_message_whose_content_length_was_wrong() -> None:
    import json
    import queue

    server = _RawServer()
    try:
        server.send(server.request(1, "initialize", {"processId": None, "rootUri": None, "capabilities": {}}))
        assert server.reply()["id"] == 1
        server.send(json.dumps({"jsonrpc": "2.0", "method": "initialized", "params": {}}).encode())
        action = {"textDocument": {"uri": "file:///nowhere/x.py"}, "context": {"diagnostics": []},
                  "range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 0}}}
        bad = server.request(99, "textDocument/codeAction", action)
        pretty = json.dumps(json.loads(bad), indent=1).encode()  # a body with newlines in it
        broken = {
            "one byte short": lambda: server.send(bad, len(bad) - 1),
            "half the body": lambda: server.send(bad, len(bad) // 2),
            "a body with lines, short": lambda: server.send(pretty, len(pretty) // 3),
            "a length of zero": lambda: server.send(bad, 0),
            "a length that is not a number": lambda: server.send(b"Content-Length: many\r\n\r\n" + bad, False),
            "junk between messages": lambda: server.send(b"garbage\r\n\x00\xff junk", False),
        }
        for n, (name, send_broken) in enumerate(broken.items(), start=10):
            send_broken()
            server.send(server.request(n, "textDocument/codeAction", action))
            try:
                reply = server.reply(timeout=20)  # a hung server never answers: this is that test
            except queue.Empty:
                raise AssertionError(f"no answer after {name}") from None
            assert reply["id"] == n, (name, reply)  # the broken request itself is lost
        server.send(server.request(50, "shutdown", None))
        assert server.reply()["id"] == 50
        server.send(json.dumps({"jsonrpc": "2.0", "method": "exit"}).encode())
        assert server.proc.wait(timeout=TIMEOUT) == 0
        assert b"amplint server: skipped" in server.proc.stderr.read()
    finally:
        if server.proc.poll() is None:
            server.proc.kill()
            server.proc.wait()



def test_a_crashing_rule_leaves_the_other_rules_findings_published(tmp_path: Path, monkeypatch) -> None:
    """A rule that raises made the server publish nothing, so the editor kept the last
    version's findings on lines that changed (hostile pass 14): the others are published, and
    the crash is said once."""
    from amplint.rules.amp105_scaler_in_loop import ScalerInLoop
    from amplint.server.app import AmplintServer

    def crash(self) -> None:
        raise RuntimeError("injected rule bug")

    monkeypatch.setattr(ScalerInLoop, "check", crash)
    server = AmplintServer()
    shown: list[str] = []
    monkeypatch.setattr(server, "_show_once", shown.append)
    text = "import torch\nfor _ in range(2):\n    scaler = torch.cuda.amp.GradScaler()\n"
    lint = server._linter((tmp_path / "t.py").as_uri())
    assert [d.code for d in lint(text)] == ["AMP401"]
    assert shown and "internal error in AMP105" in shown[0] and "injected rule bug" in shown[0]

