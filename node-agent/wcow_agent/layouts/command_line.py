"""A Windows service's command line, read as Windows reads it.

The Service Control Manager stores one string per service (``ImagePath``). Its program is
found as ``CreateProcess`` finds it: a quoted first token up to the closing quote, taken
verbatim; an unquoted one up to the first space, unless that prefix names no program and a
longer one does (``C:\\Program Files\\containerd\\containerd.exe --run-service`` without quotes
still runs containerd.exe). The arguments follow the Microsoft C runtime's rules, which Go
programs such as containerd also follow (``syscall.EscapeArg`` writes them, and
golang.org/x/sys ``svc/mgr.CreateService`` quotes the program and each argument that way
when ``containerd --register-service`` registers itself): ``2n`` backslashes before a quote
are ``n`` backslashes and the quote toggles quoting, ``2n+1`` are ``n`` and a literal quote,
``""`` inside quotes is a literal quote, other backslashes are themselves.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

_SPACES = " \t"


def split_program(line: str, exists: Callable[[str], bool] | None = None) -> tuple[str, str]:
    """(the program, the rest of the line). An unquoted program containing spaces is the
    shortest space-separated prefix that ``exists`` (or, without ``exists``, that ends in
    ``.exe``) names, as ``CreateProcess`` tries them; else the first word."""
    text = line.lstrip(_SPACES)
    if text.startswith('"'):
        end = text.find('"', 1)
        if end < 0:
            return text[1:], ""
        return text[1:end], text[end + 1 :]
    words = text.split(" ")
    for count in range(1, len(words) + 1):
        candidate = " ".join(words[:count])
        found = exists(candidate) if exists is not None else candidate.lower().endswith(".exe")
        if found:
            return candidate, " ".join(words[count:])
    first, _, rest = text.partition(" ")
    return first, rest


def split_arguments(text: str) -> list[str]:
    """The arguments after the program, by the C runtime's rules (module docstring)."""
    args: list[str] = []
    current: list[str] = []
    in_quotes = False
    started = False
    index = 0
    while index < len(text):
        char = text[index]
        if char == "\\":
            run = len(text) - index - len(text[index:].lstrip("\\"))
            index += run
            if index < len(text) and text[index] == '"':
                current.append("\\" * (run // 2))
                if run % 2:
                    current.append('"')
                    index += 1
                started = True
                continue
            current.append("\\" * run)
            started = True
            continue
        if char == '"':
            if in_quotes and text[index + 1 : index + 2] == '"':
                current.append('"')
                index += 2
                continue
            in_quotes = not in_quotes
            started = True
        elif char in _SPACES and not in_quotes:
            if started:
                args.append("".join(current))
                current, started = [], False
        else:
            current.append(char)
            started = True
        index += 1
    if started:
        args.append("".join(current))
    return args


@dataclass(frozen=True)
class CommandLine:
    program: str
    args: tuple[str, ...]

    def option(self, *names: str) -> str | None:
        """The value of the last ``--name VALUE`` / ``--name=VALUE`` / ``-n VALUE`` of these
        names (Go's flag packages accept one or two dashes; urfave/cli, which containerd and
        rke2 use, takes the last occurrence); None: not given."""
        found: str | None = None
        for index, arg in enumerate(self.args):
            for name in names:
                if arg == name and index + 1 < len(self.args):
                    found = self.args[index + 1]
                elif arg.startswith(name + "="):
                    found = arg[len(name) + 1 :]
        return found


def parse_command_line(line: str, exists: Callable[[str], bool] | None = None) -> CommandLine:
    program, rest = split_program(line, exists)
    return CommandLine(program, tuple(split_arguments(rest)))


def join_arguments(args: Sequence[str]) -> str:
    """The inverse of ``split_arguments`` (what ``syscall.EscapeArg`` writes): for tests and
    messages."""
    return " ".join(_quoted(arg) for arg in args)


def _quoted(arg: str) -> str:
    if arg and not any(c in arg for c in ' \t"'):
        return arg
    out: list[str] = ['"']
    slashes = 0
    for char in arg:
        if char == "\\":
            slashes += 1
            continue
        if char == '"':
            out.append("\\" * (2 * slashes + 1) + '"')
        else:
            out.append("\\" * slashes + char)
        slashes = 0
    out.append("\\" * (2 * slashes) + '"')
    return "".join(out)
