"""DeepFeCA: federated representation learning by clustering (Xu et al., Algorithm 6).

Each round ``t`` (Xu et al., Sec. 5, Algorithm 6):

1. **Cluster exchange.** The server sends the global network ``θ̄``. Every client embeds
   its rows with it (L2-normalised projection features) and runs the *labeller's* client
   step on the features: FeCA (Algorithms 2 and 4: centroids and radii), or, for the
   baselines, M-Avg (its ``k`` k-means centroids) or k-FED (``k'`` Awasthi-Sheffet
   centres). The server aggregates them into ``C*`` (Algorithm 5, Hungarian matching,
   or k-FED's k-means).
2. **Train exchange.** The server sends ``θ̄`` and ``C*``. Every client labels its rows by
   the nearest centroid of ``C*`` (the paper's ``argmin_j ||f(x_n) - c_j||``) and trains
   the network for ``E`` epochs on those pseudo-labels; the server averages the networks,
   weighted by client size (FedAvg).

The training follows DeepCluster-v2 (Caron et al. 2020, the method the paper modifies):
the clustering features are the L2-normalised outputs of a projection head, the
classifier's prototypes are the L2-normalised centroids ``C*``, and the loss is the
cross-entropy of the cosine similarities divided by a temperature (0.1).

Choices where the paper is silent (Sec. 5 gives only the network, the rounds, the clients,
the local epochs and the batch size), all options:

- **k**: the number of classes (10 for digits); k-FED's ``k'`` defaults to 3 (the value
  the paper used for CIFAR-10's 10 classes).
- **Classifier**: not a parameter. Its prototypes are set to ``normalize(C*)`` every round
  and stay fixed during local training, so only the backbone and the projection head are
  trained and averaged (the paper averages ``θ`` only). ``C*`` may have fewer than ``k``
  rows (FeCA can form fewer groups); the classifier then has that many outputs.
- **Optimiser**: SGD with momentum 0.9, weight decay 5e-4, learning rate 0.05, created anew
  on each client every round (no optimiser state travels). Batch 32, not the paper's 128:
  a digits client holds about 135 rows, so 128 leaves two steps per epoch and the network
  does not learn in 10 rounds (measured: the loss stays at ln k).
- **Augmentations**: DeepCluster-v2 trains on augmented views; for 8x8 images a random
  translation by up to one pixel plus Gaussian noise of 0.1 of the row's standard
  deviation; for tabular rows (``"mlp"``) Gaussian noise of 0.1 of the batch's per-feature
  standard deviation. Pseudo-labels are computed on the unaugmented rows with the broadcast
  ``θ̄`` at the start of local training.
- **Inputs**: image networks standardise every row on its own (zero mean, unit variance,
  no global statistics needed); the MLP takes rows as they are.
- **Batches of one row** are skipped (BatchNorm cannot train on them).
- **FedAvg** of integer buffers (BatchNorm's batch counters) is the rounded weighted mean.
- **Linear evaluation**: the frozen backbone's features of the labelled training rows,
  standardised, fit a multinomial logistic regression (scikit-learn); the score is top-1
  accuracy on held-out rows.

Determinism: every client draw comes from ``default_rng([seed, client, round, phase])``
and PyTorch runs with a fixed number of threads (default 1), so the Flower strategy equals
:func:`run_deepfeca` bit for bit. No Flower import (layer 1); PyTorch is imported only
when a function that needs it runs (:func:`require_torch` says which extra to install).
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ..options import Options, option
from .feca import FeCAUpload, check_feca_upload, feca_client, feca_server
from .kfed import kfed_client, kfed_server
from .lloyd import check_data, nearest_labels
from .local_centroids import LocalCentroids, check_local_centroids
from .mavg import REFERENCES, mavg_client, mavg_server

__all__ = [
    "LABELLERS",
    "NETWORKS",
    "TORCH_HINT",
    "DeepFeCAResult",
    "NetworkSpec",
    "TrainOptions",
    "build_model",
    "check_weights",
    "cluster_step",
    "embed",
    "fedavg",
    "initial_weights",
    "labeller_client",
    "labeller_server",
    "linear_probe",
    "parse_labeller_upload",
    "probe_accuracy",
    "require_torch",
    "round_rng",
    "run_deepfeca",
    "torch_threads",
    "train_step",
]

logger = logging.getLogger(__name__)

#: Networks of :mod:`flwr_clustering.algorithms.networks`.
NETWORKS = ("cnn", "resnet18", "mlp")
#: Where the pseudo-labels come from: DeepFeCA, or the M-Avg / k-FED baselines.
LABELLERS = ("feca", "mavg", "kfed")
#: The message of the ImportError raised when PyTorch is missing.
TORCH_HINT = ('DeepFeCA needs PyTorch, an optional extra of flwr-clustering: '
              'pip install "flwr-clustering[torch]"')


def require_torch():
    """Import and return ``torch``, or raise an ImportError naming the extra to install."""
    try:
        import torch
    except ImportError as err:
        raise ImportError(TORCH_HINT) from err
    return torch


def parse_shape(text: str | Sequence[int]) -> tuple[int, ...]:
    """Parse an input shape such as ``"1x8x8"`` (or a sequence of ints) into a tuple."""
    parts = text.lower().split("x") if isinstance(text, str) else list(text)
    try:
        shape = tuple(int(p) for p in parts)
    except ValueError as err:
        raise ValueError(f"malformed input shape {text!r}; write e.g. '1x8x8'") from err
    if not shape or min(shape) < 1:
        raise ValueError(f"input shape must be positive integers, got {text!r}")
    return shape


@dataclass(frozen=True)
class NetworkSpec:
    """Which network, for which inputs: everything needed to rebuild it from weights.

    Attributes
    ----------
    name : {"cnn", "resnet18", "mlp"}
        The backbone (:mod:`~flwr_clustering.algorithms.networks`).
    input_shape : tuple of int
        ``(channels, height, width)`` of the convolutional networks (rows of
        ``prod(input_shape)`` features are reshaped), ``(d,)`` of the MLP.
    proj_dim : int, default 32
        Dimension of the clustering feature (the projection head's output).
    """

    name: str = "cnn"
    input_shape: tuple[int, ...] = (1, 8, 8)
    proj_dim: int = 32

    def __post_init__(self) -> None:
        if self.name not in NETWORKS:
            raise ValueError(f"network must be one of {NETWORKS}, got {self.name!r}")
        object.__setattr__(self, "input_shape", parse_shape(self.input_shape))
        conv = self.name != "mlp"
        if conv and len(self.input_shape) != 3:
            raise ValueError(f"network {self.name!r} needs an input shape (channels, height, "
                             f"width), got {self.input_shape}")
        if not conv and len(self.input_shape) != 1:
            raise ValueError(f"network 'mlp' needs an input shape (d,), got {self.input_shape}")
        if int(self.proj_dim) != self.proj_dim or self.proj_dim < 1:
            raise ValueError(f"proj_dim must be a positive integer, got {self.proj_dim!r}")

    @property
    def n_inputs(self) -> int:
        """Features per row the network takes."""
        return math.prod(self.input_shape)

    @property
    def is_image(self) -> bool:
        """Whether rows are images (convolutional network)."""
        return self.name != "mlp"

    @classmethod
    def for_data(cls, name: str, n_features: int, input_shape: str | Sequence[int] = "",
                 proj_dim: int = 32) -> NetworkSpec:
        """The spec of network ``name`` for rows of ``n_features`` features.

        Without ``input_shape``, the convolutional networks take square single-channel
        images (``n_features`` must be a square) and the MLP takes ``(n_features,)``.
        """
        if input_shape:
            shape = parse_shape(input_shape)
        elif name == "mlp":
            shape = (int(n_features),)
        else:
            side = math.isqrt(int(n_features))
            if side * side != n_features:
                raise ValueError(
                    f"network {name!r} needs image rows: {n_features} features are not a "
                    "square single-channel image; give input_shape (e.g. '3x32x32') or use "
                    "network 'mlp'")
            shape = (1, side, side)
        spec = cls(name, shape, proj_dim)
        if spec.n_inputs != n_features:
            raise ValueError(f"input shape {spec.input_shape} has {spec.n_inputs} values, the "
                             f"rows have {n_features} features")
        return spec

    def to_config(self) -> dict[str, Any]:
        """The spec as message config (``network``, ``input-shape``, ``proj-dim``)."""
        return {"network": self.name, "input-shape": "x".join(map(str, self.input_shape)),
                "proj-dim": int(self.proj_dim)}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> NetworkSpec:
        """The inverse of :meth:`to_config`."""
        return cls(str(config["network"]), parse_shape(str(config["input-shape"])),
                   int(config["proj-dim"]))


@dataclass(frozen=True)
class TrainOptions:
    """The local training recipe (DeepCluster-v2 style; see the module docstring).

    Attributes
    ----------
    epochs : int, default 5
        Local epochs per round ``E`` (the paper: 5).
    batch_size : int, default 32
        Rows per step (the paper's 128 is too large for small clients; module docstring).
    lr, momentum, weight_decay : float
        SGD (0.05, 0.9, 5e-4).
    temperature : float, default 0.1
        Of the cosine-similarity logits (DeepCluster-v2's).
    augment : bool, default True
        Train on augmented views.
    threads : int, default 1
        PyTorch threads while a client step runs (results are reproducible for a fixed
        count; 1 keeps parallel simulated clients from oversubscribing the cores).
    """

    epochs: int = 5
    batch_size: int = 32
    lr: float = 0.05
    momentum: float = 0.9
    weight_decay: float = 5e-4
    temperature: float = 0.1
    augment: bool = True
    threads: int = 1

    def __post_init__(self) -> None:
        for name in ("epochs", "batch_size", "threads"):
            value = getattr(self, name)
            if int(value) != value or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if not (self.lr > 0 and self.temperature > 0 and 0 <= self.momentum < 1
                and self.weight_decay >= 0):
            raise ValueError("need lr > 0, temperature > 0, 0 <= momentum < 1 and "
                             "weight_decay >= 0")

    def to_config(self) -> dict[str, Any]:
        """The options as message config (kebab-case keys)."""
        return {key.replace("_", "-"): value for key, value in asdict(self).items()}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> TrainOptions:
        """The inverse of :meth:`to_config` (missing keys take the defaults)."""
        kwargs = {}
        for key, default in asdict(cls()).items():
            value = config.get(key.replace("_", "-"), default)
            kwargs[key] = type(default)(value)
        return cls(**kwargs)


# ------------------------------------------------------------------ weights (NumPy only)
def check_weights(weights: Sequence[np.ndarray], reference: Sequence[np.ndarray]
                  ) -> list[np.ndarray]:
    """Validate a network's weights against the global model's (server side).

    Parameters
    ----------
    weights : sequence of numpy.ndarray
        Received arrays, in the model's ``state_dict`` order.
    reference : sequence of numpy.ndarray
        The global model's arrays.

    Returns
    -------
    list of numpy.ndarray
        The same arrays.

    Raises
    ------
    ValueError
        Naming the first array whose count, shape or dtype differs, or that is not finite.
    """
    weights = [np.asarray(w) for w in weights]
    if len(weights) != len(reference):
        raise ValueError(f"expected {len(reference)} weight arrays, got {len(weights)}")
    for i, (w, ref) in enumerate(zip(weights, reference, strict=True)):
        if w.shape != ref.shape or w.dtype != ref.dtype:
            raise ValueError(f"weight array {i} is {w.dtype}{list(w.shape)}, expected "
                             f"{ref.dtype}{list(ref.shape)}")
        if w.dtype.kind == "f" and not np.isfinite(w).all():
            raise ValueError(f"weight array {i} contains NaN or inf")
    return weights


def fedavg(weights: Sequence[Sequence[np.ndarray]], sizes: Sequence[int]) -> list[np.ndarray]:
    """FedAvg: ``θ̄ = Σ_m (|D_m| / |D|) θ(m)`` (Algorithm 6's last line).

    Written here rather than taken from Flower, because layer 1 has no Flower and the
    dtypes must survive: float arrays are averaged in float64 in the given (client-id)
    order and cast back; integer arrays (BatchNorm's batch counters) get the rounded
    weighted mean. The sum is taken as ``θ(1) + Σ_m s_m (θ(m) - θ(1))`` with
    ``s_m = |D_m| / |D|`` (the same average, as ``Σ s_m = 1``), so identical updates come
    back exactly, whatever rounding the shares carry.

    Parameters
    ----------
    weights : sequence of list of numpy.ndarray
        Every client's network, same shapes and dtypes.
    sizes : sequence of int
        ``|D_m|``, positive.

    Returns
    -------
    list of numpy.ndarray
        The average, with the dtypes of the inputs.
    """
    if not weights:
        raise ValueError("FedAvg needs at least one model")
    sizes = np.asarray(sizes, dtype=np.float64)
    if sizes.shape != (len(weights),) or (sizes <= 0).any():
        raise ValueError(f"need one positive size per model, got {sizes.tolist()}")
    share = sizes / sizes.sum()
    out = []
    for arrays in zip(*weights, strict=True):
        first = arrays[0].astype(np.float64)
        acc = first.copy()
        for s, a in zip(share[1:], arrays[1:], strict=True):
            acc += s * (a.astype(np.float64) - first)
        dtype = arrays[0].dtype
        avg = np.rint(acc) if dtype.kind in "iub" else acc
        out.append(np.asarray(avg).astype(dtype))  # np.rint of a 0-d array is a scalar
    return out


def round_rng(seed: int, client_id: int, server_round: int, phase: int) -> np.random.Generator:
    """The generator of one client step: ``default_rng([seed, client, round, phase])``.

    ``phase`` 0 is the cluster exchange, 1 the local training.
    """
    return np.random.default_rng([int(seed), int(client_id), int(server_round), int(phase)])


# ---------------------------------------------------------------- labellers (NumPy only)
def labeller_client(F: np.ndarray, labeller: str, k: int, rng: np.random.Generator, *,
                    k_local: int | None = None, privacy_threshold: int = 2
                    ) -> list[np.ndarray]:
    """One client's upload of the cluster exchange, computed on its features ``F``.

    Parameters
    ----------
    F : numpy.ndarray of shape (n, p)
        The client's features under the global network.
    labeller : {"feca", "mavg", "kfed"}
        FeCA (``[centroids, radii]``), M-Avg (``[k centroids]``) or k-FED
        (``[centres, counts, index]``).
    k : int
        Clusters.
    rng : numpy.random.Generator
        The client's generator of this round.
    k_local : int, optional
        FeCA's and k-FED's ``k'`` (default ``k`` for FeCA, 3 for k-FED).
    privacy_threshold : int, default 2
        Clusters of fewer rows are not uploaded (M-Avg and k-FED then refuse).

    Returns
    -------
    list of numpy.ndarray
        The payload.

    Raises
    ------
    ValueError
        When the client cannot take part (too few rows for the labeller), or bad input.
    """
    if labeller == "feca":
        kl = k if k_local is None else int(k_local)
        return feca_client(F, kl, rng, privacy_threshold=privacy_threshold).upload.to_arrays()
    if labeller == "mavg":
        return [mavg_client(F, k, rng, privacy_threshold=privacy_threshold)]
    if labeller == "kfed":
        kl = 3 if k_local is None else int(k_local)
        if len(F) <= kl:
            raise ValueError(f"{len(F)} rows, not more than k'={kl}: k-FED would upload raw "
                             "rows, so this client withholds its reply")
        return kfed_client(F, kl, rng, privacy_threshold=privacy_threshold).to_arrays()
    raise ValueError(f"labeller must be one of {LABELLERS}, got {labeller!r}")


def parse_labeller_upload(arrays: Sequence[np.ndarray], labeller: str, *, k: int,
                          k_local: int | None, n_features: int | None,
                          privacy_threshold: int = 2) -> Any:
    """Decode and validate one cluster-exchange upload (server side).

    Returns
    -------
    FeCAUpload, numpy.ndarray or LocalCentroids
        By labeller.

    Raises
    ------
    ValueError
        Naming what is malformed.
    """
    if labeller == "feca":
        return check_feca_upload(FeCAUpload.from_arrays(arrays), n_features=n_features,
                                 k=k if k_local is None else int(k_local))
    if labeller == "mavg":
        if len(arrays) != 1:
            raise ValueError(f"expected 1 array (centroids), got {len(arrays)}")
        C = check_data(arrays[0], name="centroids", n_features=n_features)
        if len(C) != k:
            raise ValueError(f"{len(C)} centroids sent, M-Avg needs exactly k={k}")
        return C
    if labeller == "kfed":
        upload = check_local_centroids(LocalCentroids.from_arrays(arrays),
                                       n_features=n_features,
                                       privacy_threshold=privacy_threshold)
        kl = 3 if k_local is None else int(k_local)
        if len(upload.means) > kl:
            raise ValueError(f"{len(upload.means)} centres sent, more than k'={kl}")
        return upload
    raise ValueError(f"labeller must be one of {LABELLERS}, got {labeller!r}")


def labeller_server(uploads: Sequence[Any], labeller: str, k: int, *,
                    mavg_reference: str = "first") -> np.ndarray:
    """Aggregate the uploads (client-id order) into ``C*``.

    FeCA: Algorithm 5 (may return fewer than ``k`` rows); M-Avg: Hungarian matching to
    the reference and averaging; k-FED: max-from-set seeds and k-means over the centres.
    """
    if not uploads:
        raise ValueError("no client uploaded anything to cluster")
    if labeller == "feca":
        return feca_server(uploads, k).centroids
    if labeller == "mavg":
        if mavg_reference not in REFERENCES:
            raise ValueError(f"mavg_reference must be one of {REFERENCES}")
        return mavg_server(list(uploads), reference=mavg_reference)
    if labeller == "kfed":
        if sum(len(u.means) for u in uploads) < k:
            raise ValueError(f"k-FED received fewer than k={k} centres in all")
        return kfed_server(list(uploads), k)
    raise ValueError(f"labeller must be one of {LABELLERS}, got {labeller!r}")


# ------------------------------------------------------------------------- PyTorch part
@contextlib.contextmanager
def torch_threads(threads: int) -> Iterator[None]:
    """Run the block with PyTorch limited to ``threads`` threads (restored afterwards)."""
    torch = require_torch()
    before = torch.get_num_threads()
    torch.set_num_threads(int(threads))
    try:
        yield
    finally:
        torch.set_num_threads(before)


def build_model(spec: NetworkSpec, weights: Sequence[np.ndarray] | None = None,
                seed: int = 0):
    """Build the network of ``spec``: seeded initial weights, or ``weights`` loaded.

    The initialisation uses PyTorch's generator seeded with ``seed`` inside
    ``torch.random.fork_rng``, so the caller's global random state is untouched.
    """
    torch = require_torch()
    from .networks import DeepClusterNet

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        model = DeepClusterNet(spec.name, spec.input_shape, spec.proj_dim)
    if weights is not None:
        state = model.state_dict()
        check_weights(weights, [v.numpy() for v in state.values()])
        model.load_state_dict({name: torch.from_numpy(np.array(w, copy=True))
                               for name, w in zip(state, weights, strict=True)})
    return model


def model_weights(model) -> list[np.ndarray]:
    """The network's ``state_dict`` as a list of NumPy arrays (copies), in order."""
    return [v.detach().cpu().numpy().copy() for v in model.state_dict().values()]


def weight_names(spec: NetworkSpec) -> list[str]:
    """The ``state_dict`` keys of ``spec``'s network, in the order of the weight lists."""
    return list(build_model(spec).state_dict())


def initial_weights(spec: NetworkSpec, seed: int = 0) -> list[np.ndarray]:
    """The randomly initialised global network ``θ̄_0`` (PyTorch's default init)."""
    return model_weights(build_model(spec, seed=seed))


def _standardise(x, spec: NetworkSpec):
    if not spec.is_image:
        return x
    mean = x.mean(dim=1, keepdim=True)
    std = x.std(dim=1, keepdim=True, unbiased=False)
    return (x - mean) / (std + 1e-6)


def augment(x, spec: NetworkSpec, generator):
    """A random view of a batch of rows (see the module docstring).

    Images: translation by up to one pixel (zero padding) and Gaussian noise of 0.1 of
    each row's standard deviation. Tabular rows: Gaussian noise of 0.1 of the batch's
    per-feature standard deviation.
    """
    torch = require_torch()
    n = x.shape[0]
    if not spec.is_image:
        scale = x.std(dim=0, keepdim=True, unbiased=False) if n > 1 else torch.ones_like(x)
        return x + 0.1 * scale * torch.randn(x.shape, generator=generator)
    c, h, w = spec.input_shape
    padded = torch.nn.functional.pad(x.reshape(n, c, h, w), (1, 1, 1, 1))
    dy = torch.randint(0, 3, (n,), generator=generator)
    dx = torch.randint(0, 3, (n,), generator=generator)
    rows = (dy[:, None] + torch.arange(h))[:, None, :, None]
    cols = (dx[:, None] + torch.arange(w))[:, None, None, :]
    batch = torch.arange(n)[:, None, None, None]
    chans = torch.arange(c)[None, :, None, None]
    moved = padded[batch, chans, rows, cols].reshape(n, -1)
    noise = torch.randn(moved.shape, generator=generator)
    return moved + 0.1 * moved.std(dim=1, keepdim=True, unbiased=False) * noise


def embed(model, X: np.ndarray, spec: NetworkSpec, *, projected: bool = True,
          batch_size: int = 1024) -> np.ndarray:
    """Features of the rows ``X`` under ``model`` (evaluation mode, no gradients).

    Parameters
    ----------
    model : DeepClusterNet
        The network.
    X : numpy.ndarray of shape (n, prod(input_shape))
        Rows.
    spec : NetworkSpec
        The network's spec.
    projected : bool, default True
        The L2-normalised projection (the clustering feature); ``False``: the backbone's
        output (what the linear probe reads).
    batch_size : int
        Rows per forward pass.

    Returns
    -------
    numpy.ndarray of shape (n, p), float64
    """
    torch = require_torch()
    X = check_data(X, n_features=spec.n_inputs)
    model.eval()
    out = []
    with torch.no_grad():
        for start in range(0, len(X), batch_size):
            x = _standardise(torch.from_numpy(X[start:start + batch_size].astype(np.float32)),
                             spec)
            out.append((model(x) if projected else model.features(x)).numpy())
    width = spec.proj_dim if projected else 0
    return (np.concatenate(out).astype(np.float64) if out
            else np.empty((0, width), dtype=np.float64))


def local_train(model, X: np.ndarray, labels: np.ndarray, centroids: np.ndarray,
                spec: NetworkSpec, options: TrainOptions, seed: int) -> dict[str, float]:
    """Train ``model`` in place on pseudo-labels: DeepCluster-v2's loss, ``E`` epochs.

    ``loss = CE(normalize(head(backbone(view(x)))) · normalize(C*)ᵀ / temperature, ŷ)``
    with the prototypes ``normalize(C*)`` fixed.

    Returns
    -------
    dict
        ``loss`` (mean over the steps), ``steps``.
    """
    torch = require_torch()
    generator = torch.Generator().manual_seed(int(seed))
    prototypes = torch.nn.functional.normalize(
        torch.from_numpy(np.asarray(centroids, dtype=np.float32)), dim=1)
    optimiser = torch.optim.SGD(model.parameters(), lr=options.lr, momentum=options.momentum,
                                weight_decay=options.weight_decay)
    Xt = torch.from_numpy(np.asarray(X, dtype=np.float32))
    yt = torch.from_numpy(np.asarray(labels, dtype=np.int64))
    model.train()
    total, steps = 0.0, 0
    for _ in range(options.epochs):
        order = torch.randperm(len(Xt), generator=generator)
        for start in range(0, len(Xt), options.batch_size):
            idx = order[start:start + options.batch_size]
            if len(idx) < 2:
                continue
            x = Xt[idx]
            if options.augment:
                x = augment(x, spec, generator)
            logits = model(_standardise(x, spec)) @ prototypes.T / options.temperature
            loss = torch.nn.functional.cross_entropy(logits, yt[idx])
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            total += float(loss.detach())
            steps += 1
    return {"loss": total / steps if steps else float("nan"), "steps": steps}


def cluster_step(weights: Sequence[np.ndarray], X: np.ndarray, spec: NetworkSpec,
                 labeller: str, k: int, *, seed: int, client_id: int, server_round: int,
                 k_local: int | None = None, privacy_threshold: int = 2,
                 threads: int = 1) -> list[np.ndarray]:
    """A client's cluster exchange: embed with ``θ̄``, run the labeller's client step."""
    with torch_threads(threads):
        F = embed(build_model(spec, weights), X, spec)
    return labeller_client(F, labeller, k, round_rng(seed, client_id, server_round, 0),
                           k_local=k_local, privacy_threshold=privacy_threshold)


def train_step(weights: Sequence[np.ndarray], X: np.ndarray, centroids: np.ndarray,
               spec: NetworkSpec, options: TrainOptions, *, seed: int, client_id: int,
               server_round: int) -> tuple[list[np.ndarray], dict[str, float]]:
    """A client's train exchange: pseudo-labels from ``C*``, ``E`` local epochs.

    Returns
    -------
    tuple
        ``(θ(m), metrics)``; metrics: ``loss``, ``steps``, ``clusters-used`` (distinct
        pseudo-labels on this client).
    """
    C = check_data(centroids, name="C*", n_features=spec.proj_dim)
    if len(C) == 0:
        raise ValueError("C* is empty")
    with torch_threads(options.threads):
        model = build_model(spec, weights)
        labels = nearest_labels(embed(model, X, spec), C)
        seed_train = int(round_rng(seed, client_id, server_round, 1).integers(2**62))
        metrics = local_train(model, X, labels, C, spec, options, seed_train)
        new = model_weights(model)
    metrics["clusters-used"] = int(len(np.unique(labels)))
    return new, metrics


def linear_probe(weights: Sequence[np.ndarray], spec: NetworkSpec, X_train: np.ndarray,
                 y_train: np.ndarray, X_test: np.ndarray, y_test: np.ndarray, *,
                 threads: int = 1) -> float:
    """Top-1 accuracy of a linear classifier on the frozen backbone's features.

    A multinomial logistic regression (scikit-learn, on standardised features) is fit on
    the labelled training rows and scored on the held-out rows.
    """
    with torch_threads(threads):
        model = build_model(spec, weights)
        F_train = embed(model, X_train, spec, projected=False)
        F_test = embed(model, X_test, spec, projected=False)
    return probe_accuracy(F_train, y_train, F_test, y_test)


def probe_accuracy(F_train: np.ndarray, y_train: np.ndarray, F_test: np.ndarray,
                   y_test: np.ndarray) -> float:
    """Top-1 accuracy of the linear probe fit on features ``F_train``, scored on ``F_test``.

    Standardised features and a multinomial logistic regression (scikit-learn).
    """
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    clf = make_pipeline(StandardScaler(), LogisticRegression(max_iter=3000))
    clf.fit(F_train, np.asarray(y_train))
    return float(clf.score(F_test, np.asarray(y_test)))


@dataclass
class DeepFeCAResult:
    """Outcome of :func:`run_deepfeca`.

    Attributes
    ----------
    weights : list of numpy.ndarray
        The final global network ``θ̄``.
    centroids : numpy.ndarray
        ``C*`` of the last round (in feature space).
    history : list of dict
        Per round: ``round``, ``k-out``, ``labelling-clients``, ``dropped`` (client ids
        whose cluster step failed), ``loss`` (size-weighted mean of the clients' losses).
    initial_weights : list of numpy.ndarray
        ``θ̄_0`` (the random network).
    """

    weights: list[np.ndarray]
    centroids: np.ndarray
    history: list[dict[str, Any]] = field(default_factory=list)
    initial_weights: list[np.ndarray] = field(default_factory=list)


def run_deepfeca(
    clients: Sequence[np.ndarray],
    k: int,
    *,
    rounds: int = 10,
    labeller: str = "feca",
    spec: NetworkSpec | None = None,
    options: TrainOptions | None = None,
    k_local: int | None = None,
    seed: int = 0,
    privacy_threshold: int = 2,
    mavg_reference: str = "first",
    callback: Callable[[int, list[np.ndarray], np.ndarray], None] | None = None,
) -> DeepFeCAResult:
    """Run DeepFeCA (Algorithm 6) on in-memory client arrays: the reference loop.

    Parameters
    ----------
    clients : sequence of numpy.ndarray
        Client rows in client-id order (``prod(input_shape)`` features each).
    k : int
        Clusters (pseudo-classes).
    rounds : int, default 10
        ``T``.
    labeller : {"feca", "mavg", "kfed"}, default "feca"
        DeepFeCA, or the M-Avg / k-FED baselines.
    spec : NetworkSpec, optional
        Default: ``NetworkSpec.for_data("cnn", d)``.
    options : TrainOptions, optional
        The local training recipe.
    k_local : int, optional
        FeCA's / k-FED's ``k'``.
    seed : int, default 0
        Initial network and every client draw.
    privacy_threshold : int, default 2
        Of the labellers.
    mavg_reference : {"first", "running"}
        M-Avg's matching reference.
    callback : callable, optional
        ``callback(round, θ̄, C*)`` after every round.

    Returns
    -------
    DeepFeCAResult
        A client whose cluster step cannot take part (e.g. M-Avg with fewer rows than
        ``k``) is left out of that round's clustering, as the Flower strategy drops its
        reply; it still trains.
    """
    if labeller not in LABELLERS:
        raise ValueError(f"labeller must be one of {LABELLERS}, got {labeller!r}")
    if int(k) != k or k < 1 or rounds < 1:
        raise ValueError(f"k and rounds must be positive integers, got {k!r}, {rounds!r}")
    clients = [check_data(X, name=f"client {i} data") for i, X in enumerate(clients)]
    if not clients or any(len(X) == 0 for X in clients):
        raise ValueError("every client needs at least one row")
    spec = spec or NetworkSpec.for_data("cnn", clients[0].shape[1])
    options = options or TrainOptions()
    weights = initial_weights(spec, seed)
    result = DeepFeCAResult(weights, np.empty((0, spec.proj_dim)), [], weights)
    for rnd in range(1, rounds + 1):
        uploads, dropped = [], []
        for i, X in enumerate(clients):
            try:
                arrays = cluster_step(weights, X, spec, labeller, k, seed=seed, client_id=i,
                                      server_round=rnd, k_local=k_local,
                                      privacy_threshold=privacy_threshold,
                                      threads=options.threads)
                uploads.append(parse_labeller_upload(
                    arrays, labeller, k=k, k_local=k_local, n_features=spec.proj_dim,
                    privacy_threshold=privacy_threshold))
            except ValueError as err:
                logger.info("round %d: client %d leaves the clustering out: %s", rnd, i, err)
                dropped.append(i)
        C = labeller_server(uploads, labeller, k, mavg_reference=mavg_reference)
        updates, losses = [], []
        for i, X in enumerate(clients):
            w, metrics = train_step(weights, X, C, spec, options, seed=seed, client_id=i,
                                    server_round=rnd)
            updates.append(w)
            losses.append(metrics["loss"])
        sizes = [len(X) for X in clients]
        weights = fedavg(updates, sizes)
        loss = float(np.nansum(np.multiply(losses, sizes)) / sum(sizes))
        result.history.append({"round": rnd, "k-out": int(len(C)),
                               "labelling-clients": len(uploads), "dropped": dropped,
                               "loss": loss})
        result.weights, result.centroids = weights, C
        logger.info("DeepFeCA round %d: %d centroids from %d clients, loss %.4f", rnd,
                    len(C), len(uploads), loss)
        if callback is not None:
            callback(rnd, weights, C)
    return result


@dataclass(frozen=True)
class DeepFeCAOptions(Options):
    """Options of DeepFeCA (Xu et al. 2024, Algorithm 6): run-config keys, message config."""

    k: int = option(16, minimum=1, help="clusters, the pseudo-classes of local training")
    labeller: str = option("feca", key="pseudo-labels", choices=LABELLERS,
                           help="where the pseudo-labels come from")
    network: str = option("cnn", choices=NETWORKS, help="the network")
    input_shape: str = option("", help="e.g. '1x8x8' (empty: square image, or the feature "
                              "count for the MLP)")
    proj_dim: int = option(32, minimum=1, help="dimension of the clustering features")
    epochs: int = option(5, key="local-epochs", minimum=1, help="local epochs per round")
    batch_size: int = option(32, minimum=1, help="local batch size")
    lr: float = option(0.05, key="learning-rate", help="SGD learning rate")
    momentum: float = option(0.9, run_config=False, help="SGD momentum")
    weight_decay: float = option(5e-4, run_config=False, help="SGD weight decay")
    temperature: float = option(0.1, help="softmax temperature of the prototype loss")
    augment: bool = option(True, help="shift and noise augmentation")
    threads: int = option(1, key="torch-threads", minimum=1, help="PyTorch threads")
    k_local: int = option(0, minimum=0, help="k' of FeCA (0: k) and k-FED (0: 3)")
    privacy_threshold: int = option(2, minimum=0, help="clusters of fewer rows are never "
                                    "uploaded")
    mavg_reference: str = option("first", choices=REFERENCES, help="M-Avg's matching "
                                 "reference")
    centralized: bool = option(True, key="deepfeca-centralized", help="also train the same "
                               "network on the pooled rows (simulation report)")
    max_rounds: int = option(20, minimum=1, help="T")

    def train_options(self) -> TrainOptions:
        """The local training recipe."""
        return TrainOptions(epochs=self.epochs, batch_size=self.batch_size, lr=self.lr,
                            momentum=self.momentum, weight_decay=self.weight_decay,
                            temperature=self.temperature, augment=self.augment,
                            threads=self.threads)
