"""The pages under docs/ say what the code does: every run-config key, the generated protocol
page, every algorithm's phases (cheap, no network).

Their links resolve: tests/test_links.py; the snippets they contain run:
tests/test_readme.py.
"""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


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
