"""Links that resolve wherever the pages are read (cheap, no network).

README.md is also the package's description on a package index, where a relative link
resolves against the index's own site and breaks: README has no relative link, and names
the pages of docs/ by their path in the repository and in the sdist (``docs/index.md``),
each of which exists. Under docs/ every relative link resolves to an existing file, and
its ``#anchor``, if any, to a heading of that page (GitHub's heading ids).
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").rglob("*.md"))

_FENCE = re.compile(r"^```.*?^```", re.S | re.M)
_CODE = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"!?\[[^\]\n]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_PATH = re.compile(r"`((?:docs|tests)/[\w./-]+\.(?:md|py))(#[\w-]+)?`")


def _prose(page: Path) -> str:
    """The page without its fenced blocks and code spans."""
    return _CODE.sub("", _FENCE.sub("", page.read_text()))


def links(page: Path) -> list[str]:
    """Every link target of a Markdown page outside code (web and mail links included)."""
    return _LINK.findall(_prose(page))


def relative_links(page: Path) -> list[str]:
    """The link targets of a Markdown page that are neither web, mail nor in-page links."""
    return [t for t in links(page)
            if not re.match(r"[a-z][a-z0-9+.-]*:", t, re.I) and not t.startswith("#")]


def slug(heading: str) -> str:
    """GitHub's id of a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())  # link text
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


@cache
def anchors(page: Path) -> frozenset[str]:
    """The ids of a page's headings (a repeated heading's later ids end in -1, -2, ...)."""
    seen: dict[str, int] = {}
    out = set()
    for heading in re.findall(r"^#{1,6} (.+)$", _FENCE.sub("", page.read_text()), re.M):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return frozenset(out)


def broken(page: Path, target: str) -> str | None:
    """Why ``target`` (relative to ``page``) does not resolve, or None."""
    path, _, anchor = target.partition("#")
    file = (page.parent / path).resolve() if path else page
    if not file.is_file():
        return f"{target}: no file {path}"
    if anchor and file.suffix == ".md" and anchor not in anchors(file):
        return f"{target}: no heading #{anchor} in {file.relative_to(ROOT)}"
    return None


def test_slug_follows_githubs_heading_ids():
    assert slug("Choosing k") == "choosing-k"
    assert slug("The privacy ledger (`privacy.json`)") == "the-privacy-ledger-privacyjson"
    assert slug("Production deployment: TLS and SuperNode authentication") == (
        "production-deployment-tls-and-supernode-authentication")
    assert slug("DGC-ρ over a graph") == "dgc-ρ-over-a-graph"


def test_readme_has_no_relative_link():
    assert links(README), "README links Flower at least"
    assert relative_links(README) == []
    assert all(t.startswith("https://") for t in links(README)), links(README)


def test_the_paths_readme_names_exist():
    named = _PATH.findall(README.read_text())
    assert ("docs/index.md", "") in named
    missing = [p + a for p, a in named if broken(README, p + a)]
    assert missing == [], f"README names missing pages or headings: {missing}"


@pytest.mark.parametrize("page", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_of_the_docs_resolves(page):
    bad = [why for t in relative_links(page) if (why := broken(page, t))]
    assert bad == [], f"{page.relative_to(ROOT)}: {bad}"


def test_every_docs_page_is_reachable_from_the_index():
    seen, todo = set(), [ROOT / "docs" / "index.md"]
    while todo:
        page = todo.pop()
        if page in seen or page.suffix != ".md" or not page.exists():
            continue
        seen.add(page)
        todo += [(page.parent / t.split("#", 1)[0]).resolve() for t in relative_links(page)]
    assert [str(p.relative_to(ROOT)) for p in DOCS if p not in seen] == []


def _named_by_the_package(test: str) -> bool:
    """Whether ``test_<name>.py`` says the module it tests (docs/layout.md's rule)."""
    name = test.removeprefix("test_")
    package = ROOT / "flwr_clustering"
    if (package / f"{name}.py").is_file():  # test_<module>.py
        return True
    head, _, rest = name.partition("_")
    if head == "flower":  # test_flower_<algorithm>.py: its strategy and client
        return (package / "strategies" / f"{rest}.py").is_file()
    return (package / head / f"{rest}.py").is_file()  # test_<package>_<module>.py


def test_the_layout_page_maps_every_test_module():
    """Every test module is found by its name, or docs/layout.md says what it covers."""
    text = (ROOT / "docs" / "layout.md").read_text()
    named = set(re.findall(r"`(test_\w+)\.py`", text))
    tests = {p.stem for p in (ROOT / "tests").glob("test_*.py")}
    unmapped = sorted(t for t in tests - named if not _named_by_the_package(t)
                      and not re.fullmatch(r"test_(integration|deployment)_\w+|test_\w+_experiments"
                                           r"|test_bench\w*", t))
    assert unmapped == [], f"add these test modules to docs/layout.md's table: {unmapped}"
    assert sorted(named - tests) == [], "docs/layout.md names test modules that do not exist"
