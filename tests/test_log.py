"""The library logger: a NullHandler, propagation on, and the App's console output.

Each case runs in a fresh interpreter: logging is process-wide state, and other test
modules (and pytest) configure it.
"""

import logging
import re
import subprocess
import sys
import textwrap

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _plain(text: str) -> str:
    """Flower's console handler colours the level name; compare without the colours."""
    return _ANSI.sub("", text)


#: A user's own ServerApp code that calls ``start()`` (as README's snippet), with
#: ``np`` imported before it; it leaves ``logger`` (ours) and ``parts`` defined.
_OWN_SERVERAPP = """
        from flwr_clustering.clients import FedKMeansClient, client_app
        from flwr_clustering.log import logger
        from flwr_clustering.strategies import FedKMeans
        from flwr_clustering.testing import InProcessGrid
        rng = np.random.default_rng(0)
        parts = [rng.normal(size=(40, 2)) + 5 * (i % 2) for i in range(2)]
        app = client_app(lambda ctx: FedKMeansClient(
            parts[int(ctx.node_config["partition-id"])],
            client_id=int(ctx.node_config["partition-id"])))
        FedKMeans(k=2, min_nodes=2, max_rounds=2, tol=-1.0, seed=0).start(
            grid=InProcessGrid(app, 2))
"""


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=60, check=True)


def test_the_library_installs_no_output_handler():
    out = _run("""
        import logging
        from flwr_clustering.log import logger
        assert logger is logging.getLogger("flwr_clustering") and logger.propagate
        assert [type(h).__name__ for h in logger.handlers] == ["NullHandler"]
        logging.getLogger("flwr_clustering.algorithms.fkm").warning("silent")
    """)
    assert out.stderr == ""  # no "last resort" output from a library


def test_configure_console_prints_through_flowers_handler_once():
    out = _run("""
        import logging
        from flwr_clustering.log import configure_console, logger
        from flwr.common.logger import console_handler
        handler = configure_console()
        assert handler is console_handler and configure_console() is handler
        assert sum(h is handler for h in logger.handlers) == 1
        assert [h for h in logger.handlers if type(h).__module__.startswith("flwr_clustering")] == []
        logging.getLogger("flwr_clustering.strategies.fkm").info("round %d", 3)
        logger.debug("hidden")
    """)
    assert _plain(out.stderr) == "INFO :      round 3\n"  # Flower's own line format


def test_configure_console_leaves_a_configured_program_alone():
    out = _run("""
        import logging
        logging.basicConfig(level=logging.INFO, format="app: %(name)s %(message)s")
        from flwr_clustering.log import configure_console, logger
        assert configure_console() is None
        logger.warning("once")
    """)
    assert out.stderr == "app: flwr_clustering once\n"


def test_the_console_falls_silent_when_the_program_configures_logging_later():
    out = _run("""
        import logging
        from flwr_clustering.log import configure_console, logger
        configure_console()
        logger.warning("ours")
        logging.basicConfig(format="app: %(message)s")
        logger.warning("theirs")
    """)
    assert _plain(out.stderr) == "WARNING :   ours\napp: theirs\n"


def test_a_strategy_in_an_own_serverapp_shows_its_progress_as_fedavg_does():
    # no logging set up: a user's own ServerApp that calls start(), as README's snippet
    out = _run("""
        import numpy as np
        """ + _OWN_SERVERAPP + """
        assert [type(h).__module__.split(".")[0] for h in logger.handlers] == [
            "logging", "flwr"]  # the NullHandler and Flower's console handler: none of ours
    """)
    lines = _plain(out.stderr).splitlines()
    for line in ("[ROUND 1/2]", "[ROUND 2/2]", "fkm finished: 2 of 2 rounds"):
        assert any(x.startswith(f"INFO :      {line}") for x in lines), (line, lines)
    assert len(lines) == len(set(lines)), lines  # no line twice


def test_the_estimator_is_silent_as_kmeans_unless_the_program_configures_logging():
    fit = """
        import numpy as np
        from flwr_clustering import FederatedClustering
        rng = np.random.default_rng(0)
        parts = [rng.normal(size=(40, 2)) + 5 * (i % 2) for i in range(2)]
        FederatedClustering("fkm", n_clusters=2, random_state=0, max_rounds=2).fit(parts)
    """
    assert _run(fit).stderr == ""
    configured = _run("import logging; logging.basicConfig(level=logging.INFO, "
                      "format='app: %(message)s')\n" + textwrap.dedent(fit))
    assert "app: [ROUND 1/2]" in configured.stderr.splitlines(), configured.stderr


def test_start_leaves_a_program_that_asked_for_warnings_only_alone():
    # basicConfig(level=WARNING): neither start() nor the estimator may raise our level
    out = _run("""
        import logging
        logging.basicConfig(level=logging.WARNING, format="app: %(message)s")
        import numpy as np
        from flwr_clustering import FederatedClustering
        """ + _OWN_SERVERAPP + """
        FederatedClustering("fkm", n_clusters=2, random_state=0, max_rounds=2).fit(parts)
        assert logger.level == logging.NOTSET, logger.level
        assert [type(h).__name__ for h in logger.handlers] == ["NullHandler"]
        logger.warning("a warning still shows")
    """)
    assert out.stderr == "app: a warning still shows\n", out.stderr


def test_the_version_is_read_from_pyproject_where_the_package_is_not_installed(tmp_path):
    import shutil
    import tomllib
    from pathlib import Path

    import flwr_clustering

    root = Path(flwr_clustering.__file__).resolve().parent.parent
    declared = tomllib.loads((root / "pyproject.toml").read_text())["project"]["version"]
    assert flwr_clustering.__version__ == declared
    # the package's source beside its pyproject.toml, as an unpacked FAB holds it, with
    # the installed distribution's metadata out of sight
    shutil.copytree(root / "flwr_clustering", tmp_path / "flwr_clustering",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "flwr-clustering"\nversion = "9.8.7"\n')
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent("""
            import importlib.metadata as md, sys
            def missing(name):
                raise md.PackageNotFoundError(name)
            md.version = missing
            import flwr_clustering
            assert flwr_clustering.__file__.startswith(sys.argv[1]), flwr_clustering.__file__
            print(flwr_clustering.__version__)
        """), str(tmp_path)], cwd=tmp_path, capture_output=True, text=True, timeout=60,
        check=True)
    assert out.stdout == "9.8.7\n"


def test_the_app_hides_only_flowers_actor_termination_warning():
    """Flower's WARNING at a Ray actor's normal end is dropped; every other record passes."""
    from flwr_clustering.log import _not_actor_termination, hide_actor_termination

    flwr_logger = logging.getLogger("flwr")
    before = list(flwr_logger.filters)
    # importing the App's ClientApp (another test of this process may have) installs it
    flwr_logger.filters[:] = [f for f in before if f is not _not_actor_termination]
    try:
        hide_actor_termination()
        hide_actor_termination()  # once only
        assert flwr_logger.filters.count(_not_actor_termination) == 1

        def record(msg, path):
            return flwr_logger.makeRecord("flwr", logging.WARNING, path, 40, msg,
                                          ("ClientAppActor",), None)

        actor = "/x/flwr/simulation/ray_transport/ray_actor.py"
        assert not flwr_logger.filter(record("Manually terminating %s", actor))
        assert flwr_logger.filter(record("Manually terminating %s", "/x/other.py"))
        assert flwr_logger.filter(record("Actor %s failed", actor))
    finally:
        flwr_logger.filters[:] = before


def test_a_server_evaluation_equal_to_the_federated_one_is_not_repeated(caplog):
    from flwr_clustering.strategies.rounds import log_server_evaluation

    fed = {"sse": 45.905446586, "ari": 0.95225, "ari-client-weighted": 0.9504}
    with caplog.at_level(logging.INFO, logger="flwr_clustering"):
        log_server_evaluation(4, 20, {"sse": 45.905446586, "ari": 0.95225}, fed)
        log_server_evaluation(4, 20, {"sse": 45.9, "ari": 0.95225}, fed)
        log_server_evaluation(3, 20, {"sse": 46.0}, None)
    assert [r.getMessage() for r in caplog.records] == [
        "[ROUND 4/20] server evaluation: the federated evaluation's values",
        "[ROUND 4/20] server evaluation: sse=45.9, ari=0.9523",
        "[ROUND 3/20] server evaluation: sse=46",
    ]
