"""Secure aggregation with keys agreed once per run (flwr_clustering.secure.session)."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from flwr_clustering.secure import secure_aggregation_mod
from flwr_clustering.secure.session import (
    SESSION_RECORD,
    SecureSession,
    ids_from_bytes,
    ids_to_bytes,
    live_threshold,
    mask_words,
    ring_neighbours,
    session_digit_base,
    share_threshold,
)
from flwr_clustering.secure.sums import (
    FRACTION_BITS,
    VALUE_LIMIT,
    decode_fixed,
    digits_for,
    encode_fixed,
    neighbours,
    sum_error_bound,
)
from flwr_clustering.testing import InProcessGrid


# ------------------------------------------------------------------ the arithmetic
@pytest.mark.parametrize("clients", [2, 5, 100, 1000, 10_000, 2**21])
def test_masked_digits_sum_exactly_modulo_2_64(clients):
    base = session_digit_base(clients)
    assert base & (base - 1) == 0 and clients * base // 2 <= 2**52 and digits_for(base) == 2
    rng = np.random.default_rng(clients % 1000)
    values = rng.normal(scale=1e4, size=(min(clients, 40), 5))
    values[0, :2] = VALUE_LIMIT, -VALUE_LIMIT
    digits = [encode_fixed(v, base).astype(np.int64) for v in values]
    masks = [mask_words(bytes([i % 256]) * 32, digits[0].size) for i in range(len(values))]
    masked = [d.ravel().view(np.uint64) + m for d, m in zip(digits, masks, strict=True)]
    total = sum(masked[1:], masked[0].copy())
    for m in masks:
        total -= m
    sums = total.view(np.int64).reshape(digits[0].shape)
    # the digit sums are exact integers, and stay exact in float64
    np.testing.assert_array_equal(sums, np.sum(digits, axis=0))
    assert np.abs(sums).max() < 2**52
    out = decode_fixed(sums.astype(np.float64), base)
    exact = np.rint(values * 2.0**FRACTION_BITS).sum(axis=0) / 2.0**FRACTION_BITS
    np.testing.assert_allclose(out, exact, rtol=1e-15, atol=0)
    assert np.abs(out - values.sum(0)).max() <= sum_error_bound(len(values)) \
        + 1e-15 * np.abs(values).sum(0).max()


def test_worst_case_digits_of_many_clients_do_not_wrap():
    clients = 10_000
    base = session_digit_base(clients)
    low = encode_fixed(np.full(3, -VALUE_LIMIT), base).astype(np.int64)
    total = np.zeros(low.size, dtype=np.uint64)
    for _ in range(clients):  # every client at the range's end: the sum must not wrap
        total += low.ravel().view(np.uint64)
    np.testing.assert_array_equal(total.view(np.int64), clients * low.ravel())
    out = decode_fixed(total.view(np.int64).reshape(low.shape).astype(np.float64), base)
    np.testing.assert_array_equal(out, np.full(3, -VALUE_LIMIT * clients))


def test_masks_are_the_aes_ctr_keystream_and_differ_by_seed():
    a, b = mask_words(b"\x01" * 32, 1000), mask_words(b"\x02" * 32, 1000)
    assert a.dtype == np.uint64 and len(set(a.tolist())) == 1000
    np.testing.assert_array_equal(a, mask_words(b"\x01" * 32, 1000))
    assert not np.any(a == b)
    # every bit about half set: 64-bit words, not 32- or 62-bit ones
    bits = np.unpackbits(a.view(np.uint8)).reshape(-1, 64).mean(axis=0)
    assert bits.min() > 0.4 and bits.max() < 0.6


@pytest.mark.parametrize("n", [2, 3, 10, 31, 100, 1000])
def test_the_ring_graph_is_symmetric_with_secaggplus_degree(n):
    nodes = list(range(500, 500 + n))
    peers = ring_neighbours(nodes, seed=3)
    m = neighbours(n)
    for u, vs in peers.items():
        assert u not in vs and len(vs) == min(m, n) - 1 if m < n else len(vs) == n - 1
        assert all(u in peers[v] for v in vs)
    assert ring_neighbours(nodes, seed=3) == peers
    if m < n:
        assert ring_neighbours(nodes, seed=4) != peers


def test_share_threshold():
    assert share_threshold(1, 0.6) == 1
    assert share_threshold(4, 0.6) == 3
    assert share_threshold(20, 0.6) == 12
    assert share_threshold(20, 0.01) == 2
    with pytest.raises(ValueError, match="at least one neighbour"):
        share_threshold(0, 0.5)


# ------------------------------------------------------------------ the protocol
def _app(values, kill=(), log=None, mods=()):
    """Node i replies ``values[i]``; ``kill`` holds ``(i, stage)`` where node i fails.

    ``mods`` run between the failures and the secure aggregation mod (a lying client).
    """
    kill = set(kill)

    def killer(msg, ctx, call_next):
        rec = msg.content.config_records.get(SESSION_RECORD)
        stage = str(rec["stage"]) if rec is not None else None
        i = int(ctx.node_config["partition-id"])
        if log is not None:
            log.append((i, stage))
        if (i, stage) in kill:
            raise RuntimeError(f"client {i} died at {stage}")
        return call_next(msg, ctx)

    app = ClientApp(mods=[killer, *mods, secure_aggregation_mod])

    @app.train()
    def train(msg, ctx):
        i = int(ctx.node_config["partition-id"])
        arrays = ArrayRecord([np.asarray(v) for v in values[i]])
        metrics = MetricRecord({"num-examples": 7, "client-id": i})
        return Message(RecordDict({"arrays": arrays, "metrics": metrics}), reply_to=msg)

    return app


def _values(n, seed=0):
    rng = np.random.default_rng(seed)
    return [[rng.normal(scale=50, size=(3, 2)), rng.integers(0, 100, 3).astype(float)]
            for _ in range(n)]


def _check(out, values, ids):
    exact = [sum(values[i][j] for i in ids) for j in range(2)]
    assert out.nodes == [100 + i for i in ids]
    assert np.abs(out.sums[0] - exact[0]).max() <= out.error_bound
    np.testing.assert_array_equal(out.sums[1], exact[1])


def test_keys_once_then_each_exchange_is_an_upload_and_an_unmask():
    values, log = _values(12), []
    grid = InProcessGrid(_app(values, log=log), 12)
    session = SecureSession(seed=0)
    for rnd in (1, 2, 3):
        out = session.secure_sum(grid, grid.get_node_ids(), [np.zeros(2)], {"phase": "x"},
                                 server_round=rnd)
        _check(out, values, range(12))
        assert out.failed == {} and out.error_bound == 12 * 2.0**-33
    stages = [s for _, s in log]
    assert stages.count("keys") == stages.count("shares") == 12  # once
    assert stages.count("upload") == stages.count("unmask") == 36
    assert session.setups == 1 and session.exchange == 3
    # what the server received: keys, encrypted shares, masked integers, seeds; no value
    for msg in grid.received:
        assert set(msg.content.keys()) <= {SESSION_RECORD, "masked"}
        if "masked" in msg.content:
            (masked,) = msg.content["masked"].to_numpy_ndarrays()
            assert masked.dtype == np.uint64 and masked.size == 2 * (6 + 3)
        assert "metrics" not in msg.content and "arrays" not in msg.content


def test_one_client_s_masked_upload_looks_uniform_and_is_not_its_digits():
    values = _values(5)
    grid = InProcessGrid(_app(values), 5)
    SecureSession().secure_sum(grid, grid.get_node_ids(), [], {}, server_round=1)
    uploads = [m.content["masked"].to_numpy_ndarrays()[0] for m in grid.received
               if "masked" in m.content]
    base = session_digit_base(5)
    for i, masked in enumerate(uploads):
        digits = np.concatenate([encode_fixed(v, base).astype(np.int64).ravel()
                                 for v in values[i]])
        assert not np.any(masked.view(np.int64) == digits)
        # plain digits are below 2**51 in magnitude; masked words are spread over 2**64
        assert np.abs(masked.view(np.int64).astype(np.float64)).max() > 2**60


@pytest.mark.parametrize("kill, left_out, out_after", [
    ({(3, "upload")}, {3}, {3}),                        # before its upload
    ({(3, "unmask")}, set(), {3}),                      # after it: its root is rebuilt
    ({(3, "upload"), (4, "reveal")}, {3, 4}, {3, 4}),   # a survivor lost while revealing
    ({(3, "upload"), (4, "reveal"), (5, "unmask")}, {3, 4}, {3, 4, 5}),
])
def test_dropouts_at_every_stage_leave_an_exact_sum(kill, left_out, out_after):
    values = _values(10, seed=1)
    grid = InProcessGrid(_app(values, kill), 10)
    session = SecureSession(seed=1)
    out = session.secure_sum(grid, grid.get_node_ids(), [], {}, server_round=1)
    _check(out, values, [i for i in range(10) if i not in left_out])
    assert {n - 100 for n in out.failed} == left_out
    assert all("died at" in why for why in out.failed.values())
    assert {n - 100 for n in session.out} == out_after
    # the next exchange without them needs no new keys; with them, a new key setup
    grid.app = _app(values)
    live = [n for n in grid.get_node_ids() if n not in session.out]
    _check(session.secure_sum(grid, live, [], {}, server_round=2), values,
           [n - 100 for n in live])
    assert session.setups == 1
    _check(session.secure_sum(grid, grid.get_node_ids(), [], {}, server_round=3), values,
           range(10))
    assert session.setups == 2


def test_flower_s_64_bit_node_ids():
    """Flower's node ids are unsigned 64-bit: above 2**63 in a real run."""
    values = _values(6)
    ids = [2**64 - 1 - i * 2**61 for i in range(6)]
    grid = InProcessGrid(_app(values, {(2, "upload")}), 6, node_ids=ids)
    session = SecureSession()
    out = session.secure_sum(grid, ids, [], {}, server_round=1)
    assert out.nodes == sorted(ids[i] for i in (0, 1, 3, 4, 5))
    exact = [sum(values[i][j] for i in (0, 1, 3, 4, 5)) for j in range(2)]
    np.testing.assert_array_equal(out.sums[1], exact[1])
    assert ids_from_bytes(ids_to_bytes(ids)) == ids


def test_dropouts_that_leave_clients_too_few_neighbours_halt_the_exchange():
    """SecAgg+'s condition: t of a client's neighbourhood must remain, or no unmasking.

    Five neighbours in a row of a 30-client ring (10 neighbours each, t = 7 with itself)
    drop: the clients beside them refuse to reveal (they would keep too few masks), which
    leaves their own neighbours with too few, and so on; the exchange halts (SecAgg+
    halts too: it cannot rebuild their self masks) naming the refusals.
    """
    n = 30
    ids = [100 + i for i in range(n)]
    peers = ring_neighbours(ids, seed=5 + 1)  # the session's first key setup
    assert (len(peers[100]), live_threshold(10, 0.6)) == (10, 7)
    order = [ids[i] for i in np.random.default_rng(6).permutation(n)]
    at = order.index(100)
    gone = [order[(at - j) % n] for j in range(1, 6)]
    assert set(gone) <= set(peers[100])
    grid = InProcessGrid(_app(_values(n), {(v - 100, "upload") for v in gone}), n)
    with pytest.raises(RuntimeError, match="too few to keep its upload masked"):
        SecureSession(seed=5).secure_sum(grid, ids, [], {}, server_round=1)


def test_a_client_sends_no_seed_that_would_leave_it_with_too_few_masks():
    grid, session = _setup(8)
    u = 100
    peers = session.peers[u]
    may_drop = len(peers) + 1 - live_threshold(len(peers), 0.6)
    assert (len(peers), may_drop) == (6, 2)  # a ring of 8 with 6 neighbours, t = 5
    e = session.exchange + 1
    reply = _ask(grid, u, stage="upload", session=session.session, exchange=e, base=2**40,
                 active=ids_to_bytes(peers[:3]))
    assert reply.has_error() and "only 3 of this client's neighbours" in reply.error.reason
    reply = _ask(grid, u, stage="upload", session=session.session, exchange=e, base=2**40,
                 active=ids_to_bytes(peers))
    assert not reply.has_error()
    reply = _ask(grid, u, stage="reveal", session=session.session, exchange=e,
                 dropped=ids_to_bytes(peers[:may_drop + 1]))
    assert reply.has_error() and "too few to keep its upload masked" in reply.error.reason
    reply = _ask(grid, u, stage="reveal", session=session.session, exchange=e,
                 dropped=ids_to_bytes(peers[:may_drop]))
    assert not reply.has_error() and len(reply.content[SESSION_RECORD]["seeds"]) == may_drop


def test_too_few_survivors_halt_with_the_reasons():
    grid = InProcessGrid(_app(_values(3), {(1, "upload"), (2, "upload")}), 3)
    with pytest.raises(RuntimeError, match=r"secure aggregation halted.*client 1 died"):
        SecureSession().secure_sum(grid, grid.get_node_ids(), [], {}, server_round=1)


def test_a_lost_survivor_without_enough_shares_halts():
    # 3 clients: each holds shares of the other two (threshold 2); if one client does not
    # unmask and another does not answer the recovery, its self mask cannot be rebuilt
    grid = InProcessGrid(_app(_values(3), {(0, "unmask"), (1, "recover")}), 3)
    with pytest.raises(RuntimeError, match=r"node 100 uploaded but did not unmask"):
        SecureSession().secure_sum(grid, grid.get_node_ids(), [], {}, server_round=1)


def test_a_value_beyond_the_fixed_point_range_is_refused_by_the_client():
    values = _values(4)
    values[1][0] = values[1][0] * 1e9
    grid = InProcessGrid(_app(values), 4)
    out = SecureSession().secure_sum(grid, grid.get_node_ids(), [], {}, server_round=1)
    _check(out, values, [0, 2, 3])
    assert "exceeds 1073741824 in magnitude" in out.failed[101]


def test_a_reply_of_another_shape_counts_as_dropped():
    values = _values(5)
    values[2][1] = np.zeros(4)
    grid = InProcessGrid(_app(values), 5)
    out = SecureSession().secure_sum(grid, grid.get_node_ids(), [], {}, server_round=1)
    _check(out, values, [0, 1, 3, 4])
    assert "differ from" in out.failed[102]


# ------------------------------------------------------------------ a client's rules
def _setup(n=4):
    values = _values(n)
    grid = InProcessGrid(_app(values), n)
    session = SecureSession()
    session.secure_sum(grid, grid.get_node_ids(), [], {}, server_round=1)
    return grid, session


def _ask(grid, node, **cfg):
    msg = Message(RecordDict({SESSION_RECORD: ConfigRecord(cfg),
                              "arrays": ArrayRecord([]), "config": ConfigRecord({})}),
                  dst_node_id=node, message_type="train", group_id="9")
    (reply,) = grid.send_and_receive([msg])
    return reply


def test_a_client_masks_once_per_exchange_number():
    grid, session = _setup()
    reply = _ask(grid, 100, stage="upload", session=session.session, exchange=1,
                 base=2**40, active=ids_to_bytes([]))
    assert reply.has_error() and "is not new" in reply.error.reason


def test_a_client_reveals_no_pair_seed_after_its_self_seed():
    grid, session = _setup()
    peer = session.peers[100][0]
    reply = _ask(grid, 100, stage="reveal", session=session.session, exchange=1,
                 dropped=ids_to_bytes([peer]))
    assert reply.has_error() and "self seed is already out" in reply.error.reason


def test_a_client_gives_a_root_share_or_pair_seeds_for_a_node_never_both():
    grid, session = _setup(5)
    u, v = 100, session.peers[100][0]
    # exchange 2: the server says v dropped; u reveals its pair seed with v
    e = session.exchange + 1
    reply = _ask(grid, u, stage="upload", session=session.session, exchange=e,
                 base=2**40, active=ids_to_bytes(session.peers[u]))
    assert not reply.has_error()
    reply = _ask(grid, u, stage="reveal", session=session.session, exchange=e,
                 dropped=ids_to_bytes([v]))
    assert not reply.has_error() and len(reply.content[SESSION_RECORD]["seeds"]) == 1
    # ... and then refuses v's root share (with both the server would unmask v)
    reply = _ask(grid, u, stage="recover", session=session.session, nodes=ids_to_bytes([v]))
    assert not reply.has_error()
    assert ids_from_bytes(reply.content[SESSION_RECORD]["nodes"]) == []
    # the other way round: a root share given, no pair seed for that node afterwards
    w = session.peers[u][1]
    reply = _ask(grid, u, stage="recover", session=session.session, nodes=ids_to_bytes([w]))
    assert ids_from_bytes(reply.content[SESSION_RECORD]["nodes"]) == [w]
    e += 1
    _ask(grid, u, stage="upload", session=session.session, exchange=e, base=2**40,
         active=ids_to_bytes([x for x in session.peers[u] if x not in (v, w)]))
    reply = _ask(grid, u, stage="reveal", session=session.session, exchange=e,
                 dropped=ids_to_bytes([w]))
    assert reply.has_error()


def test_a_stage_of_an_unknown_session_is_refused():
    grid, _ = _setup()
    reply = _ask(grid, 101, stage="unmask", session="feedbeef", exchange=1)
    assert reply.has_error() and "no keys for it" in reply.error.reason


def test_the_secagg_benchmark_runs_all_three_and_they_agree():
    from simulations.secagg import cost, markdown

    (row,) = cost(clients=(4,), rounds=3, ppc=10, exchange_max=4)
    assert row["max-centroid-difference"] <= 1e-9
    assert row["secure-seconds"] > 0 and row["secaggplus-seconds"] > 0
    # per client per round: the masked digits (two per value) and the unmask seed, far
    # less than SecAgg+'s keys, shares and masked vector
    assert 2 * 8 * (16 * 2 + 16) <= row["secure-bytes"] < row["secaggplus-bytes"]
    assert "| 4 |" in markdown([row], [])


def _liar(node, stage, tamper):
    """A mod: node ``node``'s reply to ``stage`` goes through ``tamper(reply)``."""
    def liar(msg, ctx, call_next):
        rec = msg.content.config_records.get(SESSION_RECORD)
        asked = None if rec is None else str(rec["stage"])  # (the upload stage removes it)
        reply = call_next(msg, ctx)
        if ctx.node_id == node and asked == stage:
            tamper(reply)
        return reply
    return liar


def test_a_masked_vector_of_the_wrong_length_counts_as_dropped():
    values = _values(6)

    def cut(reply):
        (masked,) = reply.content["masked"].to_numpy_ndarrays()
        reply.content["masked"] = ArrayRecord([masked[:-1]])

    grid = InProcessGrid(_app(values, mods=[_liar(102, "upload", cut)]), 6)
    out = SecureSession().secure_sum(grid, grid.get_node_ids(), [], {}, server_round=1)
    _check(out, values, [0, 1, 3, 4, 5])
    assert "not the 18 digits of its shapes" in out.failed[102]


def test_a_wrong_seed_is_an_error_never_a_wrong_total():
    values = _values(6)

    def lie(reply):
        reply.content[SESSION_RECORD]["seed"] = bytes(32)

    grid = InProcessGrid(_app(values, mods=[_liar(103, "unmask", lie)]), 6)
    with pytest.raises(RuntimeError, match="outside the range .* no total is used"):
        SecureSession().secure_sum(grid, grid.get_node_ids(), [], {}, server_round=1)


def test_a_reveal_without_the_seeds_asked_for_drops_the_revealer():
    values = _values(10, seed=3)
    peers = ring_neighbours([100 + i for i in range(10)], seed=0 + 1)
    liar = peers[100][0]  # a neighbour of the client that drops

    def short(reply):
        reply.content[SESSION_RECORD] = ConfigRecord({"dropped": ids_to_bytes([]),
                                                      "seeds": []})

    # node 100 dies before its upload; its neighbour answers the reveal without the seed
    grid = InProcessGrid(_app(values, {(0, "upload")}, mods=[_liar(liar, "reveal", short)]),
                         10)
    out = SecureSession().secure_sum(grid, grid.get_node_ids(), [], {}, server_round=1)
    assert "not the 32-byte seeds asked for" in out.failed[liar]
    _check(out, values, [i for i in range(10) if 100 + i not in out.failed])
