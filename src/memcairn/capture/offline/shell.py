"""Shell parsing: what a command line reads, writes, deletes, moves or runs, and which test runner it invokes."""

from __future__ import annotations

import posixpath
import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from memcairn.capture.offline.paths import _is_abs

_PUNCT = "();<>|&\n"
_WRAPPERS = frozenset({"sudo", "env", "time", "nohup", "command", "exec", "nice", "builtin", "stdbuf"})
_RUNNERS = frozenset({"uv", "poetry", "pipenv", "hatch", "pdm", "rye"})
_READERS = frozenset({"cat", "head", "tail", "less", "more", "wc", "nl", "bat", "source", ".", "diff", "cmp", "file"})
_READ_ONLY = frozenset({
    "cat", "head", "tail", "less", "more", "wc", "nl", "bat", "ls", "find", "tree", "grep", "egrep", "fgrep", "rg",
    "ag", "pwd", "which", "whereis", "type", "file", "stat", "du", "df", "echo", "printf", "diff", "cmp", "sed",
    "awk", "sort", "uniq", "cut", "jq", "true", "realpath", "basename", "dirname", "date", "whoami", "env",
})
_GIT_READ_ONLY = frozenset({"status", "log", "diff", "show", "branch", "blame", "rev-parse", "remote", "ls-files"})
_INTERPRETERS = frozenset({"node", "deno", "ruby", "perl", "bash", "sh", "zsh", "php", "tsx", "ts-node", "bun"})
# Options that take a separate value, per program (the value is not a file).
_VALUE_OPTIONS = frozenset({"-k", "-m", "-p", "-o", "-e", "-f", "-c", "-n", "-t", "-C"})
_PROGRAM_OPTIONS: dict[str, frozenset[str]] = {
    "grep": frozenset({"-A", "-B", "-C", "-m", "-e", "-f", "-d", "-D", "--max-count"}),
    "rg": frozenset({"-A", "-B", "-C", "-m", "-e", "-f", "-g", "--glob", "-t", "--type", "-T", "--max-count"}),
    "sed": frozenset({"-e", "-f", "-l", "--expression", "--file"}),
    "head": frozenset({"-n", "-c"}),
    "tail": frozenset({"-n", "-c"}),
    "cp": frozenset({"-t", "-S"}),
    "mv": frozenset({"-t", "-S"}),
}
_NO_OPTIONS: frozenset[str] = frozenset()


@dataclass
class _ShellEffects:
    """What a command line does to files, and what kind of command it is."""

    reads: list[str] = field(default_factory=list)
    writes: list[str] = field(default_factory=list)
    deletes: list[str] = field(default_factory=list)
    moves: list[tuple[str, str]] = field(default_factory=list)
    executed: list[str] = field(default_factory=list)  # scripts run by path: kept only when inside the project
    runner: str | None = None
    read_only: bool = True


def _strip_heredocs(script: str) -> str:
    """Drop here-document bodies so their text is not parsed as commands."""
    out: list[str] = []
    pending: list[str] = []
    for line in script.splitlines():
        if pending:
            if line.strip() == pending[0]:
                pending.pop(0)
            continue
        out.append(line)
        pending.extend(m.group(2) for m in re.finditer(r"(?<!<)<<(?!<)-?\s*(['\"]?)([A-Za-z_][\w-]*)\1", line))
    return "\n".join(out)


def _tokens(script: str) -> list[str]:
    try:
        lexer = shlex.shlex(script, posix=True, punctuation_chars=_PUNCT)
        lexer.whitespace = " \t\r"
        lexer.whitespace_split = True
        lexer.commenters = ""
        return list(lexer)
    except ValueError:
        found = re.findall(r"&&|\|\||[;|&\n()]|[<>]+&?|[^\s;|&<>()]+", script)
        return [token.strip("'\"") for token in found]


def _punct_kind(token: str) -> str | None:
    if not token or any(ch not in _PUNCT for ch in token):
        return None
    if token in (">&", "<&"):
        return "dup"
    if "<<" in token:
        return "heredoc"
    if ">" in token and "<" not in token:
        return "out"
    if "<" in token:
        return "in"
    return "sep"


@dataclass
class _Segment:
    words: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    inputs: list[str] = field(default_factory=list)


def _segments(tokens: list[str]) -> list[_Segment]:
    segments = [_Segment()]
    skip_next = ""
    for token in tokens:
        kind = _punct_kind(token)
        current = segments[-1]
        if skip_next and kind is None:
            target = token if skip_next in ("out", "in") else ""
            if target and target != "/dev/null" and not target.startswith("&") and not target.isdigit():
                (current.outputs if skip_next == "out" else current.inputs).append(target)
            skip_next = ""
            continue
        skip_next = ""
        if kind == "sep":
            segments.append(_Segment())
        elif kind in ("out", "in", "dup", "heredoc"):
            if current.words and current.words[-1] in ("1", "2"):
                current.words.pop()
            skip_next = "out" if kind == "dup" else kind
        else:
            current.words.append(token)
    return [segment for segment in segments if segment.words or segment.outputs or segment.inputs]


def _command_words(words: list[str]) -> list[str]:
    """Words without leading variable assignments and wrappers (``sudo``, ``env``, ``uv run``, ``npx``...)."""
    rest = list(words)
    while rest:
        head = posixpath.basename(rest[0])
        if re.match(r"^[A-Za-z_]\w*=", rest[0]) or head in _WRAPPERS:
            rest = rest[1:]
        elif head in _RUNNERS and len(rest) > 1 and rest[1] == "run":
            rest = _drop_options(rest[2:])
        elif head in ("npx", "bunx", "pnpx"):
            rest = _drop_options(rest[1:])
        else:
            break
    return rest


def _drop_options(words: list[str]) -> list[str]:
    """Words after a runner's own leading options (``uv run --frozen pytest`` → ``pytest``)."""
    position = 0
    while position < len(words) and words[position].startswith("-"):
        position += 1
    return words[position:]


def _positionals(args: list[str], value_options: frozenset[str] = _VALUE_OPTIONS) -> list[str]:
    out: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg == "--":
            continue
        if arg.startswith("-"):
            skip = arg in value_options
            continue
        if not arg.startswith("#"):
            out.append(arg)
    return out


def _test_runner(words: list[str]) -> str | None:
    """The test runner a command invokes, if any."""
    program = posixpath.basename(words[0]) if words else ""
    args = words[1:]
    if program in ("pytest", "py.test"):
        return "pytest"
    if re.match(r"^(?:python[\d.]*|py|pypy3?)$", program) and "-m" in args:
        module = args[args.index("-m") + 1] if args.index("-m") + 1 < len(args) else ""
        return module if module in ("pytest", "unittest", "nose2", "tox") else None
    first = args[0] if args else ""
    if program == "cargo" and first in ("test", "nextest", "llvm-cov"):
        return "cargo"
    if program == "go" and first == "test":
        return "go"
    if program in ("npm", "yarn", "pnpm", "bun") and (first == "test" or (first == "run" and "test" in args[1:2])):
        return "npm"
    if program in ("jest", "vitest", "mocha", "rspec", "phpunit", "tox", "nox", "ctest"):
        return program
    if program in ("dotnet", "mvn", "gradle", "./gradlew", "mix", "just", "make") and first in ("test", "check"):
        return f"{program} {first}"
    return None


def _python_script(args: list[str]) -> str | None:
    """The script a ``python`` command line runs; none for ``-c`` or ``-m``."""
    for arg in args:
        if arg in ("-c", "-m"):
            return None
        if not arg.startswith("-"):
            return arg
    return None


def _word_effects(words: list[str], effects: _ShellEffects, depth: int) -> str | None:
    """Record what one simple command does. Returns the new directory for a ``cd``."""
    words = _command_words(words)
    if not words:
        return None
    program = posixpath.basename(words[0])
    args = words[1:]
    if not re.fullmatch(r"[\w.~+/][\w./~+-]*", words[0]):
        return None  # a group, a substitution or a stray word, not a program
    runner = _test_runner(words)
    if runner:
        effects.runner = effects.runner or runner
        effects.read_only = False
        targets = [arg.split("::")[0] for arg in _positionals(args) if "/" in arg or ".py" in arg]
        effects.reads.extend(arg for arg in targets if "..." not in arg and "=" not in arg)
        return None
    if program == "cd":
        return args[0] if args and args[0] != "-" else None
    if program == "git":
        _git_effects(args, effects)
    elif program not in _READ_ONLY or (program == "sed" and any(a.startswith(("-i", "--in-place")) for a in args)):
        effects.read_only = False
    _file_effects(program, words, args, effects, depth)
    return None


def _git_effects(args: list[str], effects: _ShellEffects) -> None:
    positional = _positionals(args, frozenset({"-C", "-c"}))
    sub = positional[0] if positional else ""
    if sub not in _GIT_READ_ONLY:
        effects.read_only = False
    paths = positional[1:]
    if sub == "mv" and len(paths) >= 2:
        effects.moves.extend((source, paths[-1]) for source in paths[:-1])
    elif sub == "rm":
        effects.deletes.extend(paths)


def _file_effects(program: str, words: list[str], args: list[str], effects: _ShellEffects, depth: int) -> None:
    family = {"egrep": "grep", "fgrep": "grep", "ag": "rg"}.get(program, program)
    plain = ("touch", "truncate", "tee", "rm", "unlink", "shred", "rmdir", "cat", "wc", "diff", "cmp")
    options = _PROGRAM_OPTIONS.get(family, _NO_OPTIONS if program in plain else _VALUE_OPTIONS)
    positional = _positionals(args, options)
    if program in _READERS:
        effects.reads.extend(arg for arg in positional if not re.fullmatch(r"[+-]?\d+", arg))
    elif program in ("grep", "egrep", "fgrep", "rg", "ag"):
        explicit = any(arg in ("-e", "-f", "--regexp", "--file") for arg in args)
        effects.reads.extend(positional if explicit else positional[1:])
    elif program == "sed":
        explicit = any(arg in ("-e", "-f", "--expression") for arg in args)
        files = positional if explicit else positional[1:]
        in_place = any(arg.startswith(("-i", "--in-place")) for arg in args)
        (effects.writes if in_place else effects.reads).extend(files)
    elif program in ("touch", "truncate", "tee"):
        effects.writes.extend(positional)
    elif program in ("rm", "unlink", "shred", "rmdir"):
        effects.deletes.extend(positional)
    elif program == "mv" and len(positional) >= 2:
        effects.moves.extend((source, positional[-1]) for source in positional[:-1])
    elif program == "cp" and len(positional) >= 2:
        effects.reads.extend(positional[:-1])
        effects.writes.append(positional[-1])
    elif re.match(r"^(?:python[\d.]*|py|pypy3?)$", program):
        script = _python_script(args)
        effects.reads.extend([script] if script else [])
    elif program in _INTERPRETERS:
        _interpreter_effects(program, args, positional, effects, depth)
    elif "/" in words[0] and program not in _READ_ONLY:
        effects.executed.append(words[0])


def _interpreter_effects(program: str, args: list[str], positional: list[str], effects: _ShellEffects,
                         depth: int) -> None:
    inline = next((args[i + 1] for i, arg in enumerate(args[:-1]) if re.fullmatch(r"-\w*c\w*", arg)), None)
    if program in ("bash", "sh", "zsh") and inline is not None:
        if depth < 2:
            _script_effects(inline, effects, depth + 1)
        return
    if program == "perl" and any(re.fullmatch(r"-\w*i\w*", arg) for arg in args):
        effects.writes.extend(positional[1:] if "-e" not in args else positional)
        return
    if positional and ("." in positional[0] or "/" in positional[0]) and "-e" not in args:
        effects.reads.append(positional[0])


def _script_effects(script: str, effects: _ShellEffects, depth: int = 0) -> None:
    """Parse a shell script into ``effects``, following ``cd`` so later relative paths are joined to it."""
    cd: str | None = None
    for segment in _segments(_tokens(_strip_heredocs(script[:20_000]))):
        before = (len(effects.reads), len(effects.writes), len(effects.deletes), len(effects.moves))
        new_dir = _word_effects(segment.words, effects, depth)
        effects.reads.extend(segment.inputs)
        effects.writes.extend(segment.outputs)
        if segment.outputs:
            effects.read_only = False
        if cd:
            _prefix_since(effects, before, cd)
        if new_dir:
            cd = new_dir if _is_abs(new_dir) or not cd else posixpath.join(cd, new_dir)


def _prefix_since(effects: _ShellEffects, before: tuple[int, int, int, int], cd: str) -> None:
    """Make paths recorded after a ``cd`` relative to that directory."""

    def fix(path: str) -> str:
        return path if _is_abs(path) else posixpath.join(cd, path)

    reads, writes, deletes, moves = before
    effects.reads[reads:] = [fix(p) for p in effects.reads[reads:]]
    effects.writes[writes:] = [fix(p) for p in effects.writes[writes:]]
    effects.deletes[deletes:] = [fix(p) for p in effects.deletes[deletes:]]
    effects.moves[moves:] = [(fix(a), fix(b)) for a, b in effects.moves[moves:]]


def _shell_command(value: Any) -> str:
    """The script of a shell call's input (``command``/``cmd`` as a string or an argv list)."""
    if isinstance(value, dict):
        for key in ("command", "cmd", "script", "commands"):
            if key in value:
                return _shell_command(value[key])
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list | tuple):
        argv = [str(part) for part in value]
        if len(argv) >= 3 and posixpath.basename(argv[0]) in ("bash", "sh", "zsh") and argv[1] in ("-c", "-lc"):
            return argv[2]
        return shlex.join(argv)
    return ""


def _check_key(command: str) -> str:
    """A command line normalised for "same command" matching (output plumbing dropped)."""
    first = " ".join(command.split())
    first = re.sub(r"\s*\d?>&\d|\s*\|\s*(?:tail|head|tee|less|cat)\b.*$", "", first)
    return first.strip()
