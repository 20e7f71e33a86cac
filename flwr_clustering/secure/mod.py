"""Secure aggregation: the server learns the federation's sums, not one client's.

Two arrangements of SecAgg+ (Bell et al. 2020), chosen by ``secagg-keys``: ``run`` (the
default, :mod:`flwr_clustering.secure.session`: keys agreed once per run from Flower's
primitives, an upload and an unmask message per exchange) and ``exchange``, this module:
Flower's SecAgg+ as Flower 1.41 ships it, unchanged:

* the server runs :class:`flwr.server.workflow.SecAggPlusWorkflow` (its four stages:
  key setup, encrypted share exchange, masked upload, unmasking with Shamir-shared seeds)
  through :func:`secure_sum`, which hands it one exchange of our protocol;
* the client runs :func:`flwr.client.mod.secaggplus_mod` inside
  :func:`secure_aggregation_mod`, a ClientApp mod that translates our messages for it.
  The library's ClientApp (:func:`flwr_clustering.clients.adapter.client_app`) has it; a
  user's own ClientApp adds ``mods=[secure_aggregation_mod]``.

No cryptographic primitive is written here: key agreement, encryption, Shamir sharing,
the mask generator and the quantizer are Flower's.

What is summed, and how exactly
    Each client's reply arrays (for example FKM's per-centroid sums and counts). SecAgg+
    sums integers modulo ``2**32``; its quantizer maps a float in ``[-c, c]`` to
    ``T`` levels. This module makes that exact: a client writes every value in fixed
    point (:data:`FRACTION_BITS` = 32 fractional bits) and splits the integer into
    balanced digits of base ``B`` (a power of two with ``n * B < 2**32`` for ``n``
    sampled clients); with ``T = B`` and ``c = B / 2`` the quantizer maps each digit to
    itself, so the digit sums arrive exactly and the server rebuilds the totals
    (:func:`encode_fixed`, :func:`decode_fixed`). Integer totals (counts) are exact; a
    float total is within ``n * 2**-33`` of the exact sum (each client's rounding to
    the fixed-point grid), plus float64 rounding (:func:`sum_error_bound`). A client
    whose value exceeds :data:`VALUE_LIMIT` in magnitude refuses (it would not fit).

Neighbours and dropouts
    Each client shares its keys with :func:`neighbours` clients (SecAgg+'s sparse graph:
    ``2 ceil(log2 n) + 1``, or all of them). A client that fails after the key setup is
    survived while every client keeps at least ``threshold`` (a fraction of its
    neighbours, at least 2; ``secagg-threshold``) active neighbours: its pairwise masks
    are rebuilt from their shares and removed, and the sum holds the remaining clients,
    named in the result. A server must control ``threshold`` of a client's neighbours to
    unmask that client alone.

What it does not stop (see ``docs/privacy.md``): the federation totals themselves (the
differencing attack on consecutive totals still works where one row moves between
clusters, as against centralized Lloyd: differential privacy stops that); a server that
controls at least ``threshold`` clients; a client that sends wrong values (secure
aggregation hides every upload, so the server cannot check one); Flower's mask generator
seeds NumPy's ``RandomState`` with 32 bits derived from the 256-bit shared secrets.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.app.message_type import MessageType
from flwr.client.mod import secaggplus_mod
from flwr.common import (
    Code,
    FitIns,
    FitRes,
    Status,
    ndarrays_to_parameters,
    parameters_to_ndarrays,
)
from flwr.common.secure_aggregation.secaggplus_constants import (
    RECORD_KEY_CONFIGS,
    RECORD_KEY_STATE,
)
from flwr.compat.common import recorddict_compat as compat

from ..log import logger
from ..protocol import client_id_of, short_reason
from .session import SESSION_RECORD, answer_session_stage
from .sums import (
    SECAGG_THRESHOLD,
    SecureSum,
    checked_values,
    decode_fixed,
    encode_fixed,
    neighbours,
    secagg_threshold_problem,
    sum_error_bound,
)

#: ``secagg-keys``: ``run`` (:mod:`flwr_clustering.secure.session`, keys agreed once per
#: run) or ``exchange`` (:func:`secure_sum`, Flower's SecAgg+ as shipped).
SECAGG_KEYS = ("run", "exchange")
#: The default ``secagg-keys``.
DEFAULT_SECAGG_KEYS = "run"
#: SecAgg+'s modulus: masked sums are integers modulo ``2**32`` (Flower's maximum).
MODULUS = 2**32
#: The weight every client reports to Flower's mod: its ratio to ``max_weight`` is 1, so
#: the values are summed unweighted.
_WEIGHT = 1000


def digit_base(clients: int) -> int:
    """``B``: the largest power of two with ``clients * B < 2**32``, at most ``2**30``.

    The sum of ``clients`` digits in ``[0, B)`` then fits the modulus (Flower's quantizer
    casts to int32, hence at most ``2**30``).
    """
    if clients < 1:
        raise ValueError(f"clients must be at least 1, got {clients}")
    return 2 ** min(30, ((MODULUS - 1) // clients).bit_length() - 1)


class _Node:
    """What the workflow needs of a ``ClientProxy``: the node id."""

    def __init__(self, node_id: int) -> None:
        self.node_id = int(node_id)
        self.cid = str(node_id)


class _OneExchange:
    """The (legacy) strategy SecAggPlusWorkflow drives: one exchange, our content.

    ``configure_fit`` returns the nodes and content chosen by :func:`secure_sum`;
    ``aggregate_fit`` receives the unmasked result (Flower's workflow hands it the
    weighted mean over the contributing clients; with equal weights the sum is the mean
    times their number) and keeps it.
    """

    def __init__(self, nodes: Sequence[int], arrays: list[np.ndarray],
                 config: dict[str, Any]) -> None:
        self.nodes = [int(n) for n in nodes]
        self.fitins = FitIns(ndarrays_to_parameters(list(arrays)), dict(config))
        self.sums: list[np.ndarray] | None = None
        self.contributors: list[int] = []

    def initialize_parameters(self, client_manager):  # noqa: D102
        return None

    def configure_fit(self, server_round, parameters, client_manager):  # noqa: D102
        return [(_Node(n), self.fitins) for n in self.nodes]

    def aggregate_fit(self, server_round, results, failures):  # noqa: D102
        self.contributors = sorted(int(proxy.node_id) for proxy, _ in results)
        if results:
            mean = parameters_to_ndarrays(results[0][1].parameters)
            self.sums = [np.asarray(a, dtype=np.float64) * len(results) for a in mean]
        return None, {}

    def configure_evaluate(self, server_round, parameters, client_manager):  # noqa: D102
        return []

    def aggregate_evaluate(self, server_round, results, failures):  # noqa: D102
        return None, {}

    def evaluate(self, server_round, parameters):  # noqa: D102
        return None


class _Recording:
    """A grid wrapper that notes the error replies (reasons) and what each node sent."""

    def __init__(self, grid) -> None:
        self.grid = grid
        self.failed: dict[int, str] = {}
        self.received: dict[int, int] = {}

    def send_and_receive(self, messages, *, timeout=None):
        messages = list(messages)
        replies = list(self.grid.send_and_receive(messages, timeout=timeout))
        for msg in replies:
            node = int(msg.metadata.src_node_id)
            if msg.has_error():
                self.failed.setdefault(node, short_reason(msg.error.reason))
                continue
            size = sum(len(a.data) for record in msg.content.array_records.values()
                       for a in record.values())
            for value in msg.content.config_records.get(RECORD_KEY_CONFIGS, {}).values():
                for item in value if isinstance(value, list) else [value]:
                    size += len(item) if isinstance(item, bytes) else 8
            self.received[node] = self.received.get(node, 0) + size
        answered = {int(m.metadata.src_node_id) for m in replies}
        for msg in messages:
            node = int(msg.metadata.dst_node_id)
            if node not in answered:
                self.failed.setdefault(node, "did not reply" if timeout is None
                                       else f"did not reply within {timeout:g} s")
        return replies


def secure_sum(grid, nodes: Sequence[int], arrays: Sequence[np.ndarray],
               config: dict[str, Any], *, server_round: int,
               threshold: float = SECAGG_THRESHOLD,
               timeout: float | None = None) -> SecureSum:
    """Send one exchange to ``nodes`` and receive only the sum of their replies.

    Parameters
    ----------
    grid : flwr.serverapp.Grid
        The grid (the workflow's messages are ``TRAIN`` messages of group ``server_round``).
    nodes : sequence of int
        The sampled node ids (at least 2).
    arrays, config
        The exchange's content, delivered with SecAgg+'s third stage: the clients answer
        it as any message of our protocol (``config["phase"]`` names the step), and their
        reply arrays are what gets summed.
    server_round : int
        The round (group id, logs).
    threshold : float, default SECAGG_THRESHOLD (0.6)
        The fraction of the sampled clients whose shares rebuild a key (at least 2): up to
        the others may drop out; a server must control that many clients to unmask one.
    timeout : float, optional
        Seconds to wait for each stage's replies.

    Returns
    -------
    SecureSum

    Raises
    ------
    RuntimeError
        If the protocol halts (fewer clients than the threshold remain), naming the
        clients that failed and why.
    """
    # the server side of Flower's SecAgg+ (imported here: clients do not need it)
    from flwr.server.compat.legacy_context import LegacyContext
    from flwr.server.workflow import SecAggPlusWorkflow
    from flwr.server.workflow.constant import MAIN_CONFIGS_RECORD, MAIN_PARAMS_RECORD
    from flwr.server.workflow.constant import Key as WorkflowKey

    nodes = sorted(int(n) for n in nodes)
    if len(nodes) < 2:
        raise ValueError(f"secure aggregation needs at least 2 clients, got {len(nodes)}")
    if (problem := secagg_threshold_problem(threshold)) is not None:
        raise ValueError(f"threshold {problem}, got {threshold}")
    base = digit_base(len(nodes))  # the quantizer maps each digit to itself (T = 2c = B)
    shares = neighbours(len(nodes))
    workflow = SecAggPlusWorkflow(
        num_shares=1.0 if shares >= len(nodes) else shares,
        reconstruction_threshold=float(threshold), max_weight=float(_WEIGHT),
        clipping_range=float(base // 2), quantization_range=base, modulus_range=MODULUS,
        timeout=timeout)
    exchange = _OneExchange(nodes, list(arrays), config)
    state = RecordDict()
    state.config_records[MAIN_CONFIGS_RECORD] = ConfigRecord(
        {WorkflowKey.CURRENT_ROUND: int(server_round)})
    state.array_records[MAIN_PARAMS_RECORD] = ArrayRecord()
    context = LegacyContext(Context(run_id=0, node_id=0, node_config={}, state=state,
                                    run_config={}), strategy=exchange)
    recording = _Recording(grid)
    workflow(recording, context)
    failed = {n: why for n, why in recording.failed.items() if n not in exchange.contributors}
    if exchange.sums is None:
        why = "; ".join(f"node {n}: {r}" for n, r in sorted(failed.items())) or "no reason given"
        raise RuntimeError(
            f"round {server_round}: secure aggregation halted: fewer than the threshold "
            f"({threshold:g} of {len(nodes)} clients, at least 2) completed the protocol; "
            f"failed: {why}")
    return SecureSum([decode_fixed(d, base) for d in exchange.sums], exchange.contributors,
                     failed, sum_error_bound(len(nodes)), dict(recording.received))


def _client_id(context: Context) -> int:
    return client_id_of(context)


def secure_aggregation_mod(msg: Message, context: Context, call_next) -> Message:
    """ClientApp mod: answer the stages of a secure exchange, pass the rest on.

    A ``TRAIN`` message of a secure session (:data:`~flwr_clustering.secure.session.
    SESSION_RECORD`) goes to :func:`~flwr_clustering.secure.session.answer_session_stage`.
    A ``TRAIN`` message with SecAgg+'s configuration goes to Flower's
    :func:`~flwr.client.mod.secaggplus_mod`. In its masked-upload stage that mod asks the
    app for the reply: this mod hands the message on as a message of our protocol
    (``arrays`` and ``config``), checks that the reply's arrays are finite and within the
    clipping range, and gives them to the mod, which quantizes, masks and sends them.
    Metrics, statistics and the row count of the reply stay on the node. Every other
    message passes through unchanged.
    """
    if msg.metadata.message_type != MessageType.TRAIN:
        return call_next(msg, context)
    if SESSION_RECORD in msg.content.config_records:
        return answer_session_stage(msg, context, call_next)
    if RECORD_KEY_CONFIGS not in msg.content.config_records:
        return call_next(msg, context)

    def answer(inner: Message, ctx: Context) -> Message:
        cid = _client_id(ctx)
        fitins = compat.recorddict_to_fitins(inner.content, keep_input=True)
        inner.content["arrays"] = ArrayRecord(parameters_to_ndarrays(fitins.parameters))
        inner.content["config"] = ConfigRecord(dict(fitins.config))
        reply = call_next(inner, ctx)
        if reply.has_error():
            raise RuntimeError(str(reply.error.reason))
        values = reply.content["arrays"].to_numpy_ndarrays() if "arrays" in reply.content else []
        setup = ctx.state.config_records[RECORD_KEY_STATE]
        base = int(setup["target_range"])
        if base != 2 * float(setup["clipping_range"]) or base & (base - 1):
            raise ValueError(f"client {cid}: secure aggregation: the server's quantization "
                             "is not the exact digit encoding of flwr_clustering.secure")
        out = [encode_fixed(a, base) for a in checked_values(values, cid)]
        logger.info("client %d round %s (secure aggregation): %d arrays (%d floats) go "
                    "masked into the sum; its metrics stay on the node", cid,
                    inner.metadata.group_id, len(out), sum(int(a.size) for a in out))
        res = FitRes(Status(Code.OK, ""), ndarrays_to_parameters(out), _WEIGHT, {})
        return Message(compat.fitres_to_recorddict(res, keep_input=False), reply_to=inner)

    return secaggplus_mod(msg, context, answer)

