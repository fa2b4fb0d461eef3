"""A user's folder: its files listed under the ignore rules (.gitignore lines, --include/--exclude: matched by
RE2, which cannot backtrack), read (readers.py) and joined with its questions file (questions.py)."""
from __future__ import annotations

from .parse_pool import parse_files
from .readers import SUPPORTED_SUFFIXES, ImportError_, code_warnings
from .questions import load_questions_jsonl
import json
import os
import re
import time
from pathlib import Path
from .code import annotate_questions, shebang_language
from rag.models import Dataset, Document, Skipped


# folders no one means as a corpus: version control, caches, virtual environments, installed packages.
# Each is skipped as one entry (named, with why), not walked: a repository's .git alone is thousands of files.
SKIPPED_FOLDERS = {".git": "version control", ".hg": "version control", ".svn": "version control",
                   "__pycache__": "compiled Python cache", ".mypy_cache": "tool cache", ".pytest_cache": "tool cache",
                   ".ruff_cache": "tool cache", ".tox": "tool cache", "node_modules": "installed packages",
                   ".venv": "virtual environment", "venv": "virtual environment", ".idea": "editor settings",
                   ".vscode": "editor settings"}


def _skipped_folder(name: str) -> str | None:
    if name in SKIPPED_FOLDERS:
        return SKIPPED_FOLDERS[name]
    if name.endswith(".egg-info") or name.endswith(".dist-info"):
        return "package metadata"
    return None


def _utf8_name(name: str) -> bool:
    """Whether a name from the file system is valid UTF-8 (undecodable bytes arrive as lone surrogates)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _shown_path(path: Path) -> str:
    """A path with undecodable bytes shown as \\xNN escapes: printable, storable, still recognisable."""
    return os.fsencode(str(path)).decode("utf-8", "backslashreplace")


GITIGNORE_MAX_BYTES = 1 << 20


MAX_PATTERN_STARS = 16  # without re2 (fallback only): a gitignore line with more '*' is skipped, said


MAX_PATTERN_CHARS = 1000


def _re2() -> bool:
    try:
        import re2  # noqa: F401  (google-re2: a linear-time automaton, no backtracking)
        return True
    except ImportError:
        return False


def pattern_spec(lines: list[str]):
    """A compiled set of gitignore lines matched by RE2 (google-re2, a dependency): linear in the path whatever the
    pattern holds (16 `*a` segments then `b` against 60 `a`s backtracked for minutes in Python's `re`; the star cap
    was no defence). Without re2 installed, pathspec's own backend and the star cap below."""
    import pathspec

    backend = "re2" if _re2() else "simple"
    try:
        return pathspec.GitIgnoreSpec.from_lines(lines, backend=backend)
    except Exception:  # noqa: BLE001 - RE2's "failed to compile Set": the lines exceed one automaton's memory
        if len(lines) < 2:
            raise
        return _PiecewiseSpec(lines, backend)


class _PiecewiseSpec:
    """A .gitignore too large for one RE2 set (about 1,000 lines, or 700 lines of stars) as several sets in order,
    each as large as compiles: matching stays linear, and git's rule holds across them (the last pattern that
    matches decides, a later '!' line included), so every file under the size cap works."""

    def __init__(self, lines: list[str], backend: str):
        import pathspec

        self.pieces, todo = [], [lines]
        while todo:
            part = todo.pop(0)
            try:
                self.pieces.append(pathspec.GitIgnoreSpec.from_lines(part, backend=backend))
            except Exception:  # noqa: BLE001 - still too large: halve it (one line alone was checked to compile)
                if len(part) < 2:
                    raise
                half = len(part) // 2
                todo[:0] = [part[:half], part[half:]]

    def match_file(self, path) -> bool:
        for piece in reversed(self.pieces):  # the last piece with a matching pattern holds git's last match
            res = piece.check_file(path)
            if res.include is not None:
                return bool(res.include)
        return False


def _collapse_stars(line: str) -> str:
    """Runs of '*' as git reads them: '**' only where a whole path segment is stars (``a/**/b``), any other run
    is one '*'. pathspec compiles each '*' to its own ``[^/]*``, so 200 stars in a row backtracked for minutes."""
    def one(m: re.Match) -> str:
        s, e = m.start(), m.end()
        whole = (s == 0 or line[s - 1] == "/") and (e == len(line) or line[e] == "/")
        return "**" if whole and e - s >= 2 else "*"
    return re.sub(r"\*{2,}", one, line)


def gitignore_lines(lines: list[str], where: str) -> tuple[list[str], list[Skipped]]:
    """The lines of a .gitignore that are safe to match, and a warning for each one left out (naming the file
    and line): a pattern git would skip (a lone backslash), or one too long or with too many stars to match in
    bounded time. Matching then stays linear in the path, whatever the file holds."""
    out, warns = [], []
    for i, raw in enumerate(lines, start=1):
        line = _collapse_stars(raw)
        why = ""
        if len(line) > MAX_PATTERN_CHARS:
            why = f"longer than {MAX_PATTERN_CHARS:,} characters"
        elif line.count("*") > MAX_PATTERN_STARS and not _re2():
            why = f"more than {MAX_PATTERN_STARS} '*' wildcards (matching it could take minutes without re2)"
        else:
            try:
                pattern_spec([line])
            except Exception as e:  # noqa: BLE001 - pathspec's own error types vary by version
                why = f"not a pattern git reads ({str(e)[:80]})"
        if why:
            warns.append(Skipped(where, f"line {i} skipped: {why}; the other lines apply", i, "warning"))
            continue
        out.append(line)
    return out, warns


def _user_patterns(patterns: tuple, flag: str) -> list[str]:
    """--include/--exclude patterns: the same bounds as a .gitignore line, but a bad one is an error (the user
    asked for it by name), never skipped."""
    lines, warns = gitignore_lines(list(patterns), flag)
    if warns:
        bad = patterns[warns[0].line - 1]
        raise ValueError(f"{flag} {bad[:80]!r}: {warns[0].reason.split(': ', 1)[1].split(';')[0]}")
    return lines


class _Ignored:
    """What `.gitignore` files (each applying below its own folder, as git reads them) and the user's
    --include/--exclude patterns (gitignore syntax, relative to the corpus folder) leave out; counted."""

    def __init__(self, root: Path, include: tuple = (), exclude: tuple = (), gitignore: bool = True):
        self.root, self.gitignore = root, gitignore
        self.include = pattern_spec(_user_patterns(include, "--include")) if include else None
        self.exclude = pattern_spec(_user_patterns(exclude, "--exclude")) if exclude else None
        # each --exclude rule on its own, to count what each left out (one line per rule in the summary)
        self.exclude_rules = [(x, pattern_spec([x])) for x in _user_patterns(exclude, "--exclude")]
        self.specs: list[tuple[Path, object]] = []  # (folder, its .gitignore)
        self.by_gitignore = self.by_pattern = 0
        self.by_rule: dict[str, int] = {}
        self.unread: list[Skipped] = []  # .gitignore files that could not be read (said, never silently ignored)

    def enter(self, d: Path) -> None:
        g = d / ".gitignore"
        if self.gitignore and g.is_file():
            try:
                if g.stat().st_size > GITIGNORE_MAX_BYTES:  # a corpus file like any other: capped
                    raise OSError(f"larger than {GITIGNORE_MAX_BYTES:,} bytes")
                lines = g.read_text(encoding="utf-8", errors="replace").splitlines()
            except OSError as e:
                self.unread.append(Skipped(str(g), f"not read ({e}): its patterns leave nothing out", kind="warning"))
                return
            lines, warns = gitignore_lines(lines, str(g))
            self.unread.extend(warns)
            self.specs.append((d, pattern_spec(lines)))

    def _git(self, path: Path, is_dir: bool) -> bool:
        for base, spec in self.specs:
            if path.is_relative_to(base) and path != base:
                rel = path.relative_to(base).as_posix() + ("/" if is_dir else "")
                if spec.match_file(rel):
                    return True
        return False

    def ignored(self, path: Path, is_dir: bool = False) -> bool:
        """Whether a file or folder is left out (counted): a folder by .gitignore or --exclude (pruned whole), a
        file by those or by not matching --include."""
        rel = path.relative_to(self.root).as_posix() + ("/" if is_dir else "")
        if self._git(path, is_dir):
            self.by_gitignore += 1
            return True
        if self.exclude is not None and self.exclude.match_file(rel):
            rule = next((f"--exclude {x}" for x, sp in self.exclude_rules if sp.match_file(rel)), "--exclude")
        elif not is_dir and self.include is not None and not self.include.match_file(rel):
            rule = "--include (matched no pattern)"
        else:
            return False
        self.by_pattern += 1
        self.by_rule[rule] = self.by_rule.get(rule, 0) + 1
        return True

    def summary(self, folder: Path) -> list[Skipped]:
        out = list(self.unread)
        if self.by_gitignore:
            out.append(Skipped(str(folder), f"{self.by_gitignore} files or folders left out by .gitignore "
                                            "(--no-gitignore reads them)"))
        for rule, n in sorted(self.by_rule.items()):  # one line per rule, as docs/datasets.md promises
            out.append(Skipped(str(folder), f"{n} files or folders left out by {rule}"))
        return out


def list_folder(folder: Path, follow_symlinks: bool = False, include: tuple = (), exclude: tuple = (),
                gitignore: bool = True, never: tuple = ()) -> tuple[list[Path], list[Skipped]]:
    """Files under ``folder``, in a stable order. Symbolic links are skipped with a reason unless
    ``follow_symlinks`` (a hostile corpus could link /etc into prompts and reports); loops, broken
    links and folders named like documents (``x.pdf/``) are reported. `.gitignore` files are honoured
    (``gitignore=False``: not), ``include``/``exclude`` are gitignore-style patterns; ``never``: folders never
    read (the workspace, when it lives inside the corpus: its indexes, caches and reports)."""
    root = folder.resolve()
    files, skipped = [], []
    seen_dirs = set()
    ignored = _Ignored(folder, tuple(include), tuple(exclude), gitignore)
    never_ids = set()
    for n in never:
        try:
            st = Path(n).stat()
            never_ids.add((st.st_dev, st.st_ino))
        except OSError:
            pass
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=follow_symlinks):
        d = Path(dirpath)
        st = d.stat()
        if (st.st_dev, st.st_ino) in seen_dirs:
            skipped.append(Skipped(str(d), "symbolic link loop (folder already visited)"))
            dirnames[:] = []
            continue
        seen_dirs.add((st.st_dev, st.st_ino))
        ignored.enter(d)
        keep = []
        for name in sorted(dirnames):
            sub = d / name
            try:
                sst = sub.stat()
                if (sst.st_dev, sst.st_ino) in never_ids:
                    skipped.append(Skipped(str(sub), "folder skipped (the workspace: its indexes, caches and "
                                                     "reports are never ingested)"))
                    continue
            except OSError:
                pass
            if _utf8_name(name) and ignored.ignored(sub, is_dir=True):
                continue
            if not _utf8_name(name):
                skipped.append(Skipped(_shown_path(sub), "folder name is not valid UTF-8 (skipped with its files; "
                                                         "rename it to include them)"))
                continue
            why = _skipped_folder(name)
            if why:
                skipped.append(Skipped(str(sub), f"folder skipped ({why})"))
                continue
            if sub.is_symlink() and not follow_symlinks:
                skipped.append(Skipped(str(sub), f"symbolic link to {os.path.realpath(sub)} skipped "
                                                 "(pass --follow-symlinks to include linked folders)"))
                continue
            if sub.suffix.lower() in SUPPORTED_SUFFIXES:
                skipped.append(Skipped(str(sub), "a folder named like a document (its files are still read)"))
            keep.append(name)
        dirnames[:] = keep
        for name in sorted(filenames):
            f = d / name
            if not _utf8_name(name):  # its id would not survive the store, the index or a report
                skipped.append(Skipped(_shown_path(f), "file name is not valid UTF-8 (rename it to include it)"))
                continue
            if name == ".gitignore" or ignored.ignored(f):
                continue
            if f.is_symlink():
                target = Path(os.path.realpath(f))
                if not target.exists():
                    skipped.append(Skipped(str(f), f"broken symbolic link (to {target})"))
                    continue
                if not follow_symlinks:
                    where = "inside" if target.is_relative_to(root) else "outside"
                    skipped.append(Skipped(str(f), f"symbolic link to {target} ({where} the folder) skipped "
                                                   "(pass --follow-symlinks to include it)"))
                    continue
            if not f.is_file():
                skipped.append(Skipped(str(f), "not a regular file"))
                continue
            files.append(f)
    return sorted(files, key=lambda p: p.relative_to(folder).as_posix()), skipped + ignored.summary(folder)


def load_folder(folder: str | Path, questions_path: str | Path | None = None, name: str | None = None,
                parse_cache: ParseCache | None = None, progress: bool = False,
                follow_symlinks: bool = False, engine=None, previous=None, include: tuple = (),
                exclude: tuple = (), gitignore: bool = True, never: tuple = ()) -> Dataset:
    """A folder of documents (recursively) plus an optional JSONL question file.

    Document ids are the paths relative to the folder (``guide.md``, ``sub/notes.txt``).
    See docs/datasets.md for the JSONL schema. ``previous(doc_id)``: the last good version of a
    document already ingested (or None); a file that cannot be read now keeps that version, said
    aloud, instead of losing its rows and gold questions.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise ImportError_(f"{folder}: not a folder")
    paths, skipped = list_folder(folder, follow_symlinks, include, exclude, gitignore, never)
    todo = []
    by_type: dict[str, list[str]] = {}  # unsupported files, one summary line (36 lines for .json/.gz/.toml read as noise)
    for path in paths:
        if path.suffix.lower() not in SUPPORTED_SUFFIXES and not (not path.suffix and shebang_language(path)):
            if questions_path is None or path.resolve() != Path(questions_path).resolve():
                by_type.setdefault(path.suffix.lower() or "(no extension)", []).append(
                    path.relative_to(folder).as_posix())
            continue
        todo.append((path, path.relative_to(folder).as_posix()))
    if by_type:
        kinds = sorted(by_type.items(), key=lambda kv: (-len(kv[1]), kv[0]))
        n = sum(len(v) for v in by_type.values())
        skipped.append(Skipped(str(folder), f"{n} files of unsupported types skipped: " + ", ".join(
            f"{k} {len(v)} (e.g. {v[0]})" for k, v in kinds)))
    docs, bad, seconds = parse_files(todo, None, parse_cache, progress, f"parsing {folder.name}",
                                      engine)
    if previous is not None and bad:
        docs, bad = _keep_last_good(todo, docs, bad, previous)
    skipped.extend(bad)
    skipped.extend(code_warnings(docs))
    questions = []
    if questions_path is not None:
        from .conversations import is_conversation_file, load_conversations_jsonl

        qp = Path(questions_path)
        if qp.is_file() and is_conversation_file(qp):  # one conversation a line (docs/conversations.md)
            questions, bad = load_conversations_jsonl(qp, docs)
        else:
            questions, bad = load_questions_jsonl(questions_path, docs)
        skipped.extend(bad)
        annotate_questions(questions, docs)
    return Dataset(name or folder.name, docs, questions, skipped, parse_seconds=seconds)


def _keep_last_good(todo, docs, bad, previous):
    """An unreadable new version of an ingested file (corrupt, emptied, caught mid-save) keeps the
    version ingested before: its rows and its gold questions stay; the skip becomes a warning naming it."""
    doc_of = {str(path): doc_id for path, doc_id in todo}
    order = {doc_id: i for i, (_, doc_id) in enumerate(todo)}
    still_bad = []
    for sk in bad:
        old = previous(doc_of[sk.path]) if sk.path in doc_of else None
        if old is None:
            still_bad.append(sk)
            continue
        docs.append(old)
        still_bad.append(Skipped(sk.path, f"{sk.reason}; kept the last good version ingested before "
                                          "(its rows and gold questions stay)", kind="warning"))
    docs.sort(key=lambda d: order.get(d.doc_id, len(order)))
    return docs, still_bad
