"""The README and the pages under docs/ link only to files that exist (cheap, no network).

The snippets they contain run in tests/test_readme.py.
"""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

_FENCE = re.compile(r"^```.*?^```", re.S | re.M)
_CODE = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"!?\[[^\]\n]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def relative_links(page: Path) -> list[str]:
    """Link targets of a Markdown page outside code, without web, mail or in-page links."""
    text = _CODE.sub("", _FENCE.sub("", page.read_text()))
    return [t for t in _LINK.findall(text)
            if not re.match(r"[a-z][a-z0-9+.-]*:", t, re.I) and not t.startswith("#")]


def test_the_docs_exist_and_the_readme_links_them():
    assert (ROOT / "docs" / "index.md") in PAGES and len(PAGES) > 10
    assert "docs/index.md" in relative_links(ROOT / "README.md")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_to_existing_files(page):
    missing = [t for t in relative_links(page)
               if not (page.parent / t.split("#", 1)[0]).exists()]
    assert missing == [], f"{page.relative_to(ROOT)} links to missing files: {missing}"


def test_every_docs_page_is_reachable_from_the_readme():
    seen, todo = set(), [ROOT / "README.md"]
    while todo:
        page = todo.pop()
        if page in seen or page.suffix != ".md" or not page.exists():
            continue
        seen.add(page)
        todo += [(page.parent / t.split("#", 1)[0]).resolve() for t in relative_links(page)]
    assert [str(p.relative_to(ROOT)) for p in PAGES if p not in seen] == []


def test_every_run_config_key_is_documented():
    from flwr_clustering.app.config import default_run_config

    text = (ROOT / "docs" / "configuration.md").read_text()
    missing = [key for key in default_run_config() if f"`{key}`" not in text]
    assert missing == []
