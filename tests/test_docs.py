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


# ------------------------------------------------ the generated message-protocol page
def test_the_protocol_page_is_up_to_date():
    """docs/protocol.md is what `python -m simulations docs` generates from the registry."""
    from simulations.docs import PROTOCOL_PAGE, protocol_markdown

    assert (ROOT / PROTOCOL_PAGE).read_text() == protocol_markdown(), (
        "docs/protocol.md is out of date: run `python -m simulations docs`")


def test_the_docs_command_writes_and_checks_the_page(tmp_path, capsys):
    from simulations.cli import main
    from simulations.docs import PROTOCOL_PAGE

    (tmp_path / "docs").mkdir()
    assert main(["docs", "--check", "--root", str(tmp_path)]) == 1
    assert not (tmp_path / PROTOCOL_PAGE).exists()
    assert main(["docs", "--root", str(tmp_path)]) == 0
    assert main(["docs", "--check", "--root", str(tmp_path)]) == 0
    assert "up to date" in capsys.readouterr().out


_CLIENT_PHASE = re.compile(r"""phase"?\)?\s*[!=]=\s*"([\w-]+)\"""")
_SENT_PHASE = re.compile(r'"phase":\s*"([\w-]+)"(?:\s+if\s+[^\n]+?\s+else\s+"([\w-]+)")?')
_EXCHANGE_PHASE = re.compile(r'\.exchange\(\s*grid,\s*[^,]+,\s*"([\w-]+)"')
_DECLARED_PHASE = re.compile(r'^\s+phase\s*=\s*"([\w-]+)"', re.MULTILINE)  # OneShotStrategy


def _phases_in_code(spec) -> set[str]:
    """Phase names the client compares ``config["phase"]`` with and the strategy sends."""
    import inspect

    client, strategy = inspect.getsource(spec.client), inspect.getsource(spec.strategy)
    found = (set(_CLIENT_PHASE.findall(client)) | set(_EXCHANGE_PHASE.findall(strategy))
             | set(_DECLARED_PHASE.findall(strategy)))
    for pair in _SENT_PHASE.findall(strategy):
        found |= {p for p in pair if p}
    return found


def test_every_algorithm_documents_the_phases_of_its_code():
    from flwr_clustering import registry

    for name in registry.names():
        spec = registry.get(name)
        assert spec.protocol, f"{name} declares no protocol"
        documented = {p.name for p in spec.protocol}
        in_code = _phases_in_code(spec)
        assert in_code, (f"{name}: no phase found in {spec.client.__name__} or "
                         f"{spec.strategy.__name__} (has the code's style changed? update "
                         "_phases_in_code)")
        assert in_code <= documented, (
            f"{name}: phases {sorted(in_code - documented)} are in the code but not in its "
            f"protocol {sorted(documented)}")
