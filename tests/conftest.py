import os

import pytest

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("FLWR_DISABLE_UPDATE_CHECK", "1")
os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
os.environ.setdefault("MPLBACKEND", "Agg")


@pytest.fixture(scope="session")
def garst_beta10():
    from flwr_clustering.data.synthetic import garst_beta_split

    return garst_beta_split(10.0)
