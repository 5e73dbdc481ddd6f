"""The language server: LSP requests in, `engine.check_source` findings and fixes out."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path

from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.uris import to_fs_path

from amplint import __version__, notebooks
from amplint.config import ConfigError
from amplint.diagnostics import Applicability, Diagnostic
from amplint.engine import SourceError, check_source
from amplint.fixes import fix_text
from amplint.server import convert
from amplint.server.configs import Configs
from amplint.sources import undecodable_as_read
from amplint.suppression import add_noqa_edits

FIX_ALL = "source.fixAll.amplint"
# How long typing must pause before a changed buffer is checked (Ruff's server and most
# editors' linters wait a few hundred milliseconds too).
CHANGE_PAUSE_S = 0.2
# After a save or a file event, before the other open buffers are checked again.
DISK_PAUSE_S = 0.3


@dataclass
class Buffer:
    """The last check of one open document: its findings and their LSP form, side by side."""

    version: int | None
    found: list[tuple[Diagnostic, types.Diagnostic]] = field(default_factory=list)
    lint: object = None  # text -> diagnostics with this buffer's path and configuration


class AmplintServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__("amplint", __version__, text_document_sync_kind=types.TextDocumentSyncKind.Incremental)
        self.configs = Configs()
        self.buffers: dict[str, Buffer] = {}
        self._shown_errors: set[str] = set()
        self.pending_changes: dict[str, int] = {}  # uri -> the newest change's number (debounce)
        self.disk_generation = 0  # the newest save or file event's number (disk_changed)

    # --- checking ----------------------------------------------------------------------

    def check(self, uri: str) -> None:
        """Lint the buffer's current text and publish the findings (an empty list clears them)."""
        doc = self.workspace.get_text_document(uri)
        lint = self._linter(uri) if doc.language_id in (None, "", "python") else None
        buffer = self.buffers[uri] = Buffer(doc.version, lint=lint)
        published: list[types.Diagnostic] = []
        if lint is not None:
            try:
                for d in lint(doc.source):
                    lsp = convert.diagnostic(d, doc.lines, doc.position_codec)
                    buffer.found.append((d, lsp))
                    published.append(lsp)
            except SourceError as exc:
                published.append(convert.parse_error(exc.line, exc.col0, exc.reason, doc.lines, doc.position_codec))
        self.text_document_publish_diagnostics(
            types.PublishDiagnosticsParams(uri=uri, version=doc.version, diagnostics=published)
        )

    def _untitled_home(self) -> Path:
        """Where a never-saved buffer takes its [tool.amplint] from: the first workspace folder,
        else the server's working directory (as `amplint check -` run there would)."""
        try:
            folders = list(self.workspace.folders.values())
        except Exception:  # noqa: BLE001 - no workspace yet
            folders = []
        for folder in folders:
            fs = to_fs_path(folder.uri) if folder.uri.startswith("file:") else None
            if fs:
                return Path(fs)
        root = getattr(self.workspace, "root_path", None)
        return Path(root) if root else Path.cwd()

    def _linter(self, uri: str):
        """`text -> diagnostics` for this document, or None when amplint does not check it."""
        fs_path = to_fs_path(uri) if uri.startswith("file:") else None
        path = Path(fs_path) if fs_path else None
        if path is None and not uri.startswith("untitled:"):
            # NB: e.g. `vscode-notebook-cell:`: one cell of a notebook is not a module, and
            # checking it alone would report what other cells settle.
            return None
        if path is not None and notebooks.is_notebook(path):
            return None  # notebook documents are not served (see amplint/server/__init__.py)
        try:
            config = self.configs.for_path(path if path is not None else self._untitled_home() / "untitled.py")
        except ConfigError as exc:
            self._show_once(f"amplint: {exc}")
            reason = f"amplint did not analyse this file: {exc}"

            def refuse(text: str) -> list[Diagnostic]:
                # NB: an empty list would show the file as clean; `amplint check` exits 2 here
                raise SourceError(str(path) if path is not None else "<buffer>", 1, 0, reason)

            return refuse
        if path is not None and config.is_excluded(path):
            return None
        name = str(path) if path is not None else "<buffer>"

        def lint(text: str) -> list[Diagnostic]:
            # The editor decoded the file as it could; if the saved file is one amplint (and
            # Python) cannot decode, say so, as `amplint check` and flake8 do.
            unreadable = undecodable_as_read(path, text) if path is not None else None
            if unreadable is not None:
                raise SourceError(name, 1, 0, unreadable)
            crashes: list = []  # a crashing rule must not hide what the others found
            found = check_source(text, name, config, crashes=crashes)
            for crash in crashes:
                self._show_once(f"amplint: internal error in {crash.code} on {name}: {crash.error}")
            return found

        return lint

    def _show_once(self, message: str) -> None:
        if message not in self._shown_errors:
            self._shown_errors.add(message)
            self.window_show_message(types.ShowMessageParams(type=types.MessageType.Error, message=message))

    async def disk_changed(self, first: str | None = None) -> None:
        """Files saved, created, moved or deleted: what imports resolve to, who imports whom
        (a new caller of a helper) and which pyproject.toml applies may all have changed.
        The caches are read again and every open buffer is checked again, not only the one
        saved: another buffer's findings may come from the file that changed.

        The saved buffer at once (its user waits for it); the others after a pause, one at a
        time with the server answering in between, and a newer change abandons the round: with
        a dozen large buffers open, each save had blocked the server for seconds, and autosave
        left it ever further behind (hostile pass 23)."""
        from amplint.project.index import reset_shared

        self.configs.forget()
        reset_shared()  # NB: clears the layout's caches (import resolution) too
        self.disk_generation += 1
        generation = self.disk_generation
        if first is not None and first in self.workspace.text_documents:
            self.check(first)
        await asyncio.sleep(DISK_PAUSE_S)
        for uri in list(self.buffers):
            if self.disk_generation != generation:
                return  # a newer change re-checks them all
            if uri != first and uri in self.workspace.text_documents:
                self.check(uri)
                await asyncio.sleep(0)  # let the messages that came meanwhile be answered

    # --- code actions ------------------------------------------------------------------

    def code_actions(self, params: types.CodeActionParams) -> list[types.CodeAction]:
        uri = params.text_document.uri
        buffer = self.buffers.get(uri)
        if buffer is None:
            return []
        doc = self.workspace.get_text_document(uri)
        if buffer.version != doc.version:
            # The text changed since the last check (typing, inside the pause before the
            # next one): the findings' edits belong to the old text, and placed on this one
            # they corrupt it (hostile pass 19). Check the text as it is now.
            self.check(uri)
            buffer = self.buffers[uri]
        lines, codec = doc.lines, doc.position_codec
        wanted = params.context.only

        def allowed(kind: str) -> bool:
            return not wanted or any(kind == w or kind.startswith(w + ".") for w in wanted)

        actions: list[types.CodeAction] = []
        here = [(d, lsp) for d, lsp in buffer.found if convert.overlaps(lsp.range, params.range)]
        if allowed(types.CodeActionKind.QuickFix):
            for d, lsp in here:
                if d.fix is not None:
                    safe = d.fix.applicability is Applicability.SAFE
                    actions.append(types.CodeAction(
                        title=f"{d.code}: {d.fix.title}" + ("" if safe else " (unsafe)"),
                        kind=types.CodeActionKind.QuickFix,
                        diagnostics=[lsp],
                        is_preferred=safe,
                        edit=self._edit(uri, convert.text_edits(d.fix.edits, lines, codec)),
                    ))
            for d, lsp in here:
                noqa = add_noqa_edits(doc.source, [(d.span.line, d.code)])
                if noqa:
                    actions.append(types.CodeAction(
                        title=f"{d.code}: Suppress with `# noqa: {d.code}`",
                        kind=types.CodeActionKind.QuickFix,
                        diagnostics=[lsp],
                        edit=self._edit(uri, convert.text_edits(noqa, lines, codec)),
                    ))
        if allowed(FIX_ALL) and buffer.lint is not None and any(
            d.fix is not None and d.fix.applicability is Applicability.SAFE for d, _ in buffer.found
        ):
            try:
                outcome = fix_text(doc.source, buffer.lint, unsafe=False)
            except SourceError:
                outcome = None
            if outcome is not None and outcome.source != doc.source:
                actions.append(types.CodeAction(
                    title="amplint: Fix all safe fixes",
                    kind=FIX_ALL,
                    edit=self._edit(uri, convert.whole_text_edits(doc.source, outcome.source, lines, codec)),
                ))
        return actions

    @staticmethod
    def _edit(uri: str, edits: list[types.TextEdit]) -> types.WorkspaceEdit:
        return types.WorkspaceEdit(changes={uri: edits})


def build() -> AmplintServer:
    server = AmplintServer()

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: AmplintServer, params: types.DidOpenTextDocumentParams) -> None:
        ls.check(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    async def did_change(ls: AmplintServer, params: types.DidChangeTextDocumentParams) -> None:
        # Typing sends a change per keystroke, and a check of a large module takes seconds:
        # checking each version in turn left the screen seconds behind the text (hostile
        # pass 16). Wait for a pause; a newer change supersedes this one, and the check reads
        # the document as it is by then.
        uri = params.text_document.uri
        generation = ls.pending_changes[uri] = ls.pending_changes.get(uri, 0) + 1
        await asyncio.sleep(CHANGE_PAUSE_S)
        if ls.pending_changes.get(uri) != generation or uri not in ls.workspace.text_documents:
            return  # a newer change will check; or the document was closed meanwhile
        ls.check(uri)

    @server.feature(types.TEXT_DOCUMENT_DID_SAVE)
    async def did_save(ls: AmplintServer, params: types.DidSaveTextDocumentParams) -> None:
        await ls.disk_changed(first=params.text_document.uri)

    @server.feature(types.WORKSPACE_DID_CHANGE_WATCHED_FILES)
    async def did_change_watched_files(ls: AmplintServer, params: types.DidChangeWatchedFilesParams) -> None:
        # A `git pull` or a branch switch adds a caller or a pyproject.toml without any buffer
        # being saved (hostile pass 21): the editor says so here, when it watches files.
        await ls.disk_changed()

    @server.feature(types.INITIALIZED)
    async def initialized(ls: AmplintServer, params: types.InitializedParams) -> None:
        # Ask the editor to report Python files and pyproject.toml changed on disk; an editor
        # that cannot register watchers dynamically still sends saves.
        watch = types.DidChangeWatchedFilesRegistrationOptions(watchers=[
            types.FileSystemWatcher(glob_pattern="**/*.py"),
            types.FileSystemWatcher(glob_pattern="**/pyproject.toml"),
        ])
        capabilities = ls.client_capabilities.workspace
        dynamic = capabilities is not None and capabilities.did_change_watched_files is not None and \
            bool(capabilities.did_change_watched_files.dynamic_registration)
        if dynamic:
            try:
                await ls.client_register_capability_async(types.RegistrationParams(registrations=[types.Registration(
                    id="amplint-watch", method=types.WORKSPACE_DID_CHANGE_WATCHED_FILES, register_options=watch)]))
            except Exception:  # noqa: BLE001 - a client that refuses still sends saves
                pass

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: AmplintServer, params: types.DidCloseTextDocumentParams) -> None:
        ls.buffers.pop(params.text_document.uri, None)
        ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=params.text_document.uri, diagnostics=[]))

    @server.feature(
        types.TEXT_DOCUMENT_CODE_ACTION,
        types.CodeActionOptions(code_action_kinds=[types.CodeActionKind.QuickFix, FIX_ALL], resolve_provider=False),
    )
    def code_action(ls: AmplintServer, params: types.CodeActionParams) -> list[types.CodeAction]:
        return ls.code_actions(params)

    return server
