"""The repository speaks of the product: no file cites the project's own issue numbers or its
private notes (upstream sources are cited by repository, file and version instead)."""

from __future__ import annotations

import re
import subprocess

from tests.conftest import ROOT

ISSUE = re.compile(r"\bissues?\s*#?\s*\d+", re.IGNORECASE)
NOTES = re.compile(r"shared/reference|/work/(?:shared|notes)")
# This file and the docs' reference check hold the patterns as their own test input.
EXEMPT = {"tests/delivery/test_repository_words.py", "tests/delivery/test_doc_references.py"}


def tracked_text_files() -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    return [name for name in listed if name not in EXEMPT and name != "uv.lock"]


def test_no_file_cites_an_issue_number_or_the_projects_notes() -> None:
    found = []
    for name in tracked_text_files():
        if not (ROOT / name).is_file():
            continue  # a link or a folder, deleted in the work tree
        try:
            text = (ROOT / name).read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError):
            continue  # binary, or deleted in the work tree
        for number, line in enumerate(text.splitlines(), 1):
            if ISSUE.search(line) or NOTES.search(line):
                found.append(f"{name}:{number}: {line.strip()[:120]}")
    assert not found, "\n".join(found)


def test_the_patterns_catch_what_they_look_for() -> None:
    assert ISSUE.search("as issue 19 says")
    assert ISSUE.search("Issue #20's target")
    assert NOTES.search("see shared/reference/distributions.md")
    assert not ISSUE.search("containerd#5892, Azure/AKS#1792")
    assert len(tracked_text_files()) > 100
