"""The documentation's references stay true to the repository: every relative link resolves
(file and heading anchor), every repository path written in backticks exists, every long flag
written after a command exists in that command's parser, no doc cites an issue number or the
project's private notes, and the README stays a front door (at most 300 lines).

Each failure names the file, the line and the reference."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

from tests.conftest import ROOT
from wcow_agent.cli import build_parser as agent_parser
from wcow_operator import uninstall_command as uninstall
from wcow_operator.cli import build_parser as wcow_parser
from wcow_operator.plugin.cli import _parser as plugin_parser
from wcow_operator.settings import _parser as operator_parser

README_MAX_LINES = 300
# Top-level folders of the repository: a backticked text starting with one is a path.
REPO_FOLDERS = (
    ".ci/", ".github/", "benchmarks/", "charts/", "contract/", "crds/", "deploy/", "docs/",
    "examples/", "node-agent/", "operator/", "tests/", "tools/",
)  # fmt: skip
LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_LINK = re.compile(r"^\s*\[[^\]]+\]:\s*(\S+)")
CODE_SPAN = re.compile(r"(`+)(.+?)(?<!`)\1(?!`)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"")
ISSUE = re.compile(r"\bissues?\s*#?\s*\d+", re.IGNORECASE)
COMMAND = re.compile(r"(?:^|(?<=[\s/`(]))(kubectl wcow|wcow-agent|wcow-operator|wcow)(?=\s|$)")
FLAG = re.compile(r"^--(?:\[no-\])?[a-z][a-z0-9-]*")
SHELL_BREAKS = {"|", "||", "&&", ";", ">", ">>", "<", "&", "2>&1", "#"}


def documents() -> list[Path]:
    found = [ROOT / "README.md", ROOT / "CHANGELOG.md", ROOT / "CONTRIBUTING.md"]
    found += sorted((ROOT / "docs").rglob("*.md"))
    found.append(ROOT / "benchmarks" / "README.md")
    return found


def _name(path: Path) -> str:
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)


def _lines(path: Path) -> Iterator[tuple[int, str, bool]]:
    """(line number, text, inside a fenced code block) of a Markdown file."""
    fence = ""
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        marker = re.match(r"^\s*(```+|~~~+)", line)
        if marker and (not fence or marker.group(1).startswith(fence)):
            fence = "" if fence else marker.group(1)[:3]
            continue
        yield number, line, bool(fence)


def _prose(line: str) -> str:
    """The line without its code spans (links inside code are not links)."""
    return CODE_SPAN.sub("", line)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: the text of links and code, lower case, without
    punctuation but ``-`` and ``_``, spaces made hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"<[^>]+>", "", text).lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    """Every anchor GitHub gives the headings of ``path`` (repeats get ``-1``, ``-2``, ...),
    and the explicit ``<a id=...>`` / ``<a name=...>`` ones."""
    seen: dict[str, int] = {}
    found = set()
    for _, line, in_code in _lines(path):
        if in_code:
            continue
        found.update(HTML_ANCHOR.findall(line))
        heading = HEADING.match(line)
        if not heading:
            continue
        base = slug(heading.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return frozenset(found)


def _link_problem(doc: Path, target: str) -> str | None:
    if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
        return None
    path_part, _, anchor = target.partition("#")
    path = (doc.parent / path_part).resolve() if path_part else doc
    if not path.exists():
        return f"links to {target}: no such file"
    if not path.is_relative_to(ROOT):
        return f"links to {target}: outside the repository"
    if anchor and path.suffix == ".md" and anchor not in anchors(path):
        return f"links to {target}: {_name(path)} has no heading with the anchor #{anchor}"
    return None


def _link_problems(doc: Path) -> Iterator[str]:
    for number, line, in_code in _lines(doc):
        if in_code:
            continue
        prose = _prose(line)
        targets = LINK.findall(prose) + REFERENCE_LINK.findall(prose)
        for target in targets:
            problem = _link_problem(doc, target)
            if problem:
                yield f"{_name(doc)}:{number}: {problem}"


def _path_problems(doc: Path) -> Iterator[str]:
    for number, line, in_code in _lines(doc):
        if in_code:
            continue
        for _, span in CODE_SPAN.findall(line):
            text = span.strip()
            if not text.startswith(REPO_FOLDERS) or re.search(r"[\s<>*{}$]|\.\.\.", text):
                continue
            if not (ROOT / text.rstrip(".,:;")).exists():
                yield f"{_name(doc)}:{number}: `{text}`: no such path in the repository"


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # argparse has no public list of its actions
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _flags(parser: argparse.ArgumentParser) -> frozenset[str]:
    return frozenset(o for a in parser._actions for o in a.option_strings if o.startswith("--"))


@cache
def parsers() -> dict[str, tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]]:
    """Each command's own parser and its subcommands' parsers."""
    agent, wcow, plugin = agent_parser(), wcow_parser(), plugin_parser()
    return {
        "wcow-agent": (agent, _subcommands(agent)),
        "wcow": (wcow, _subcommands(wcow)),
        "kubectl wcow": (plugin, _subcommands(plugin)),
        "wcow-operator": (operator_parser(), {"uninstall": uninstall.parser()}),
    }


def _commands(text: str) -> Iterator[tuple[str, str | None, list[str]]]:
    """(command, subcommand, the long flags written after it) for each command in ``text``,
    the flags up to the next shell separator or command."""
    matches = list(COMMAND.finditer(text))
    for index, match in enumerate(matches):
        end = matches[index + 1].start() if index + 1 < len(matches) else len(text)
        if match.group(1) == "wcow" and text[: match.start()].endswith("kubectl "):
            continue  # `kubectl wcow` is matched as a whole
        words = text[match.end() : end].split()
        subcommand = None
        if words and not words[0].startswith("-"):
            subcommand = words[0]
        flags = []
        for word in words:
            if word in SHELL_BREAKS or word.startswith("#"):
                break
            flag = FLAG.match(word)
            if flag:
                flags.append(flag.group(0))
        yield match.group(1), subcommand, flags


def _known(flag: str, parser: argparse.ArgumentParser) -> bool:
    names = _flags(parser)
    if flag.startswith("--[no-]"):
        name = flag.removeprefix("--[no-]")
        return {f"--{name}", f"--no-{name}"} <= names
    return flag in names


def _command_texts(doc: Path) -> Iterator[tuple[int, str]]:
    """Code spans, and the lines of fenced code blocks with their continuations joined."""
    pending: tuple[int, str] | None = None
    for number, line, in_code in _lines(doc):
        if not in_code:
            for _, text in CODE_SPAN.findall(line):
                yield number, text
            continue
        start, text = pending if pending else (number, "")
        text += " " + line
        if line.rstrip().endswith("\\"):
            pending = (start, text.rstrip().removesuffix("\\"))
            continue
        pending = None
        yield start, text


def _flag_problems(doc: Path) -> Iterator[str]:
    for number, text in _command_texts(doc):
        for command, subcommand, flags in _commands(text):
            own, subcommands = parsers()[command]
            parser = subcommands.get(subcommand or "", own)
            if command == "wcow-operator" and subcommand not in subcommands:
                parser = own  # `wcow-operator --flag ...`: the controller's settings
            where = f"{command} {subcommand}" if parser is not own else command
            for flag in flags:
                if not _known(flag, parser):
                    yield f"{_name(doc)}:{number}: `{where} {flag}`: no such flag"


def _text_problems(doc: Path) -> Iterator[str]:
    for number, line, _ in _lines(doc):
        for found in ISSUE.findall(line):
            yield f"{_name(doc)}:{number}: cites {found!r}: say what is meant instead"
        if "shared/" in line:
            yield f"{_name(doc)}:{number}: cites the project's notes (shared/): cite the source"


CHECKS = {
    # (a) every relative link resolves to a file and, with #anchor, to one of its headings
    "links resolve": _link_problems,
    # (b) every repository path written in backticks exists
    "paths exist": _path_problems,
    # (c) every long flag written after a command exists in that command's parser
    "flags exist": _flag_problems,
    # (d) no issue numbers, no citations of the project's private notes
    "no issue numbers": _text_problems,
}


@pytest.mark.parametrize("check", CHECKS)
@pytest.mark.parametrize("doc", documents(), ids=_name)
def test_the_references_of_each_doc_are_true(doc: Path, check: str) -> None:
    problems = list(CHECKS[check](doc))
    assert problems == [], "\n".join(problems)


def test_the_readme_is_a_front_door() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, f"README.md: {lines} lines, more than {README_MAX_LINES}"


def test_the_checks_find_what_they_check() -> None:
    """Each check sees real references in the docs, so none passes by finding nothing."""
    docs = documents()
    links = [t for d in docs for _, line, c in _lines(d) if not c for t in LINK.findall(line)]
    assert sum(not t.startswith("http") for t in links) > 50
    assert sum("#" in t for t in links) > 20
    spans = [
        t for d in docs for n, line, c in _lines(d) if not c for _, t in CODE_SPAN.findall(line)
    ]
    assert sum(t.startswith(REPO_FOLDERS) for t in spans) > 20
    commands = [c for d in docs for _, t in _command_texts(d) for c in _commands(t) if c[2]]
    assert {c[0] for c in commands} >= {"wcow-agent", "wcow", "wcow-operator"}
    assert len(commands) > 10


def test_the_checks_catch_what_they_are_for(tmp_path: Path) -> None:
    assert slug("`kubectl wcow`: status and diagnostics") == "kubectl-wcow-status-and-diagnostics"
    assert slug("Image checks (`--resolve-images`)") == "image-checks---resolve-images"
    assert slug("3. Where a WCOW Hyper-V utility VM's image comes from") == (
        "3-where-a-wcow-hyper-v-utility-vms-image-comes-from"
    )
    doc = ROOT / "docs" / "broken-example.md"
    assert _link_problem(doc, "install.md#requirements") is None
    assert _link_problem(doc, "install.md#no-such-heading") is not None
    assert _link_problem(doc, "no-such-file.md") is not None
    bad = list(_commands("wcow-agent run --hyperv auto --no-hyperv | grep x --nothing"))
    assert bad == [("wcow-agent", "run", ["--hyperv", "--no-hyperv"])]
    assert _known("--hyperv", parsers()["wcow-agent"][1]["run"])
    assert not _known("--no-hyperv", parsers()["wcow-agent"][1]["run"])
    assert _known("--[no-]leader-election", parsers()["wcow-operator"][0])
    assert ISSUE.search("as issue 19 says")
    assert ISSUE.search("Issue #20's target")
    sample = tmp_path / "sample.md"
    sample.write_text(
        "See `deploy/samples/` and `deploy/no-such-file.yaml`, `tests/e2e -m e2e`.\n"
        "```sh\nwcow-agent merge --config x \\\n  --plan p --no-such-flag\n```\n",
        encoding="utf-8",
    )
    assert [p.split(": ", 1)[1] for p in _path_problems(sample)] == [
        "`deploy/no-such-file.yaml`: no such path in the repository"
    ]
    assert [p.split(": ", 1)[1] for p in _flag_problems(sample)] == [
        "`wcow-agent merge --no-such-flag`: no such flag"
    ]
