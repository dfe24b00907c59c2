"""The documentation keeps up with the code: every environment variable the settings read is in
docs/configuration.md, and every link between the project's Markdown files leads somewhere."""

from __future__ import annotations

import ast
import re

from tests.support.gateway_process import ROOT

READERS = {"envstr", "envint", "envfloat", "envbool", "envlist"}


def variables_read(source: str) -> set[str]:
    """Names passed as a constant to the settings' env readers, os.environ.get, os.getenv or
    os.environ[...]."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            called = ast.unparse(node.func)
            if called in READERS or called in ("os.environ.get", "os.getenv"):
                names.add(str(node.args[0].value))
        elif (isinstance(node, ast.Subscript) and ast.unparse(node.value) == "os.environ"
              and isinstance(node.slice, ast.Constant)):
            names.add(str(node.slice.value))
    return names


def test_the_reader_finds_each_way_of_reading_a_variable():
    source = 'A = envstr("ONE", "")\nB = envint(\n    "TWO", 1)\nC = os.environ.get("THREE")\nD = os.environ["FOUR"]\n'
    assert variables_read(source) == {"ONE", "TWO", "THREE", "FOUR"}


def test_every_setting_read_from_the_environment_is_documented():
    read = variables_read((ROOT / "gpuportal" / "settings.py").read_text())
    assert len(read) > 50  # the reader still understands settings.py
    documented = set(re.findall(r"`([A-Z][A-Z0-9_]+)`", (ROOT / "docs" / "configuration.md").read_text()))
    assert sorted(read - documented) == []


def test_every_link_between_the_markdown_files_leads_to_a_file():
    pages = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "SECURITY.md", *sorted((ROOT / "docs").glob("*.md"))]
    broken = []
    for page in pages:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if re.match(r"[a-z]+:", target):
                continue  # a web address, not a file of the project
            path = target.split("#", 1)[0]
            if path and not (page.parent / path).resolve().is_file():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert broken == []


def test_the_readme_links_every_page_of_the_docs():
    readme = (ROOT / "README.md").read_text()
    missing = [p.name for p in (ROOT / "docs").glob("*.md") if f"(docs/{p.name})" not in readme]
    assert missing == []
