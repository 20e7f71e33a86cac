"""Secure aggregation with keys agreed once per run: SecAgg+ at near a plain round's price.

Flower's SecAgg+ as shipped (:func:`flwr_clustering.secure.secure_sum`) runs its four
stages for every exchange: new key pairs, key agreement with every neighbour, Shamir
shares of two secrets per client, and at the end a Shamir reconstruction of every
survivor's self-mask seed. Measured at 100 clients that is 65 times a plain FKM round
(docs/privacy.md). This module runs the same masking with Flower's primitives (key pairs,
ECDH + HKDF shared keys, Fernet encryption, Shamir sharing) arranged so that the costly
ones run once per *session* (the run's clients), and an exchange costs one masked upload
plus one short unmasking message.

Session setup (two exchanges, once; again only when new clients join)
    ``keys``: every client makes two key pairs (Flower's ``generate_key_pairs``) and sends
    the public keys. ``shares``: the server sends each client the public keys of its
    neighbours (a ring over the session's clients in a seeded order, ``neighbours(n)``
    of them: SecAgg+'s sparse graph); the client derives with each an encryption key and a
    mask root (Flower's ``generate_shared_key``: ECDH + HKDF), draws a 32-byte self-mask
    root ``b_u``, splits it with Flower's Shamir sharing (``t`` of its neighbours rebuild
    it) and sends each share encrypted (Fernet) for its neighbour; the server forwards
    them with the next upload. The private keys are then dropped.

Each secure exchange ``e`` (1, 2, ...)
    ``upload``: the client answers the exchange's message as any message of the protocol,
    writes its reply arrays in fixed point digits (:func:`session_digit_base`, modulus
    ``2**64``), adds its self mask ``PRG(HKDF(b_u, e))`` and, for every neighbour ``v`` in
    the exchange, the pair mask ``+-PRG(HKDF(s_uv, e))`` (``+`` when ``u < v``), and sends
    the masked integers. ``reveal`` (only when a client did not upload): every survivor
    with a dropped neighbour sends the pair seeds of this exchange with it; a survivor
    that fails here counts as dropped too (its self seed was never sent). ``unmask``: every
    survivor sends its own self seed of ``e``. ``recover`` (only when a survivor does not
    answer ``unmask``): its neighbours send their shares of its root ``b_u``; the server
    rebuilds it (Flower's Shamir combine) and leaves that client out of the rest of the
    session (its later self masks would be known). The pair masks of two survivors cancel
    in the sum; the server removes the self masks and the revealed pair masks and decodes
    the digit sums (:func:`flwr_clustering.secure.sums.decode_fixed`).

PRG
    AES-256 in counter mode (``cryptography``, which Flower's Fernet uses) keyed by the
    256-bit seed: uniform 64-bit words. Flower's own mask generator seeds NumPy's
    ``RandomState`` with 32 bits of its seed; this one keeps all 256.

What the server learns, and what changed against SecAgg+ per exchange (docs/privacy.md)
    The sum over the exchange's surviving clients, as before. A client keeps its state
    (derived keys, the shares it holds) for the run instead of one exchange; each
    exchange's masks are fresh (derived from the roots with the exchange's number, which a
    client accepts only once and in increasing order). A dropped client's pair masks are
    revealed for that exchange only (its neighbours send the seeds, SecAgg+ rebuilds its
    private key); a client whose root was rebuilt, or whose pair seeds were revealed, takes
    no further part in the session, and no honest client gives both kinds for one client.
    A client uploads, reveals pair seeds or its self seed only while
    :func:`live_threshold` of its neighbourhood (itself included) remain in the exchange:
    dropouts around it never leave it masked by seeds the server holds only.
    The same ``t`` colluding neighbours of a client that unmask it under SecAgg+ unmask it
    here. Semi-honest server, as Flower's SecAgg+: a server that lies about who dropped to
    different clients is not detected (no signatures, as in Flower).
"""

from __future__ import annotations

import base64
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.app.message_type import MessageType
from flwr.common.secure_aggregation.crypto.shamir import combine_shares, create_shares
from flwr.common.secure_aggregation.crypto.symmetric_encryption import (
    decrypt,
    encrypt,
    generate_shared_key,
)
from flwr.supercore.primitives.asymmetric import (
    bytes_to_private_key,
    bytes_to_public_key,
    generate_key_pairs,
    private_key_to_bytes,
    public_key_to_bytes,
)

from ..log import logger
from ..protocol import client_id_of, short_reason
from .sums import (
    SECAGG_THRESHOLD,
    SecureSum,
    checked_values,
    decode_fixed,
    digits_for,
    encode_fixed,
    neighbours,
    secagg_threshold_problem,
    sum_error_bound,
)

__all__ = [
    "SESSION_RECORD",
    "SecureSession",
    "answer_session_stage",
    "ids_from_bytes",
    "ids_to_bytes",
    "live_threshold",
    "mask_words",
    "ring_neighbours",
    "session_digit_base",
    "share_threshold",
]

#: The config record that carries a session stage (server -> client and back).
SESSION_RECORD = "secure-session"
#: The client's state record (in ``Context.state``).
_STATE = "secure-session-state"
#: Digit sums stay within ``2**52`` (exact in int64 and in float64).
_SUM_BITS = 52


def session_digit_base(clients: int) -> int:
    """``B``: the largest power of two with ``clients * B / 2 <= 2**52``.

    Balanced digits lie in ``[-B/2, B/2)``, so the sum of ``clients`` of them stays within
    ``2**52`` in magnitude: exact in int64 modulo ``2**64`` and in float64 (the decode).
    Two digits hold a 63-bit fixed-point value up to ``2**21`` clients.
    """
    if clients < 1:
        raise ValueError(f"clients must be at least 1, got {clients}")
    return 2 ** min(62, _SUM_BITS + 1 - math.ceil(math.log2(clients)))


def share_threshold(peers: int, threshold: float) -> int:
    """``t``: how many of a client's ``peers`` neighbours rebuild its self-mask root.

    ``ceil(threshold * peers)``, at least 2 (at most ``peers``; 1 with a single peer, whose
    sum with the client's own reveals each to the other anyway).
    """
    if peers < 1:
        raise ValueError(f"a client needs at least one neighbour, got {peers}")
    return min(peers, max(2, math.ceil(threshold * peers)))


def live_threshold(peers: int, threshold: float) -> int:
    """How many of an exchange's clients around a client, itself included, must remain.

    ``ceil(threshold * (peers + 1))``, at least 2 (at most ``peers + 1``): SecAgg+'s
    threshold over a client's ``peers + 1`` shares. A client sends a pair seed or its self
    seed only while that many of its neighbours and itself uploaded, so that dropouts
    around it never leave its upload unmasked by anything but seeds the server holds.
    """
    if peers < 1:
        raise ValueError(f"a client needs at least one neighbour, got {peers}")
    return min(peers + 1, max(2, math.ceil(threshold * (peers + 1))))


def ring_neighbours(nodes: Sequence[int], seed: int) -> dict[int, list[int]]:
    """SecAgg+'s sparse graph: each node's :func:`neighbours` on a seeded ring.

    The nodes are put in a random order (``seed``); each one's neighbours are the
    ``(m - 1) / 2`` nodes before and after it, ``m = neighbours(n)`` (every other node
    when that is all of them). Symmetric; sorted lists without the node itself.
    """
    nodes = sorted(int(n) for n in nodes)
    n = len(nodes)
    m = neighbours(n)
    if m >= n:
        return {u: [v for v in nodes if v != u] for u in nodes}
    order = [nodes[i] for i in np.random.default_rng(seed).permutation(n)]
    half = (m - 1) // 2
    out = {}
    for i, u in enumerate(order):
        out[u] = sorted({order[(i + j) % n] for j in range(-half, half + 1) if j})
    return out


def _derive(root: bytes, purpose: bytes, session: str, exchange: int) -> bytes:
    """The 32-byte seed of ``purpose`` for ``exchange`` (HKDF-SHA256, as Flower's keys)."""
    info = b"flwr-clustering|" + purpose + b"|" + session.encode() + b"|%d" % exchange
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(root)


def mask_words(seed: bytes, size: int) -> np.ndarray:
    """``size`` uniform 64-bit words from a 32-byte seed (AES-256-CTR keystream)."""
    encryptor = Cipher(algorithms.AES(seed), modes.CTR(bytes(16))).encryptor()
    return np.frombuffer(encryptor.update(bytes(8 * size)), dtype=np.uint64).copy()


def _root(shared_key: bytes) -> bytes:
    """The raw 32 bytes of Flower's (base64, Fernet) shared key."""
    return base64.urlsafe_b64decode(shared_key)


def ids_to_bytes(nodes) -> bytes:
    """Node ids (unsigned 64-bit, as Flower's) packed for a record."""
    return np.asarray([int(n) for n in nodes], dtype=np.uint64).tobytes()


def ids_from_bytes(data: bytes) -> list[int]:
    """The node ids of :func:`ids_to_bytes`."""
    return [int(n) for n in np.frombuffer(bytes(data), dtype=np.uint64)]


def _pack_share(src: int, dst: int, session: str, share: bytes) -> bytes:
    return b"|".join([b"%d" % src, b"%d" % dst, session.encode(), base64.b64encode(share)])


def _unpack_share(data: bytes) -> tuple[int, int, str, bytes]:
    src, dst, session, share = data.split(b"|")
    return int(src), int(dst), session.decode(), base64.b64decode(share)


# ------------------------------------------------------------------------- client side
#: State fields kept as packed bytes (a ConfigRecord checks every list item on each save):
#: lists of node ids, and lists of byte strings.
_INT_LISTS = ("peers", "held-from", "pair-revealed", "root-revealed", "active")
_BYTES_LISTS = ("enc-keys", "roots", "held")


class _ClientSession:
    """A client's state of one session, kept in its ``Context.state`` between messages.

    One record per session (a run may hold several: a choice of k's candidates, a
    resumed run); a new session's key setup starts a new record.
    """

    def __init__(self, context: Context, session: str) -> None:
        self.context = context
        self.name = f"{_STATE}:{session}"
        rec = context.state.config_records.get(self.name)
        self.values: dict[str, Any] = {}
        for key, value in (dict(rec) if rec is not None else {}).items():
            if key in _INT_LISTS:
                value = ids_from_bytes(value)
            elif key in _BYTES_LISTS:
                sizes = np.frombuffer(rec[key + ":sizes"], dtype=np.int64)
                ends = np.cumsum(sizes).tolist()
                starts = [0, *ends[:-1]] if ends else []
                value = [value[a:b] for a, b in zip(starts, ends, strict=True)]
            elif key.endswith(":sizes"):
                continue
            self.values[key] = value

    def save(self) -> None:
        out: dict[str, Any] = {}
        for key, value in self.values.items():
            if key in _INT_LISTS:
                value = ids_to_bytes(value)
            elif key in _BYTES_LISTS:
                out[key + ":sizes"] = np.asarray([len(v) for v in value],
                                                 dtype=np.int64).tobytes()
                value = b"".join(value)
            out[key] = value
        self.context.state.config_records[self.name] = ConfigRecord(out)

    def get_list(self, key: str) -> list:
        return list(self.values.get(key, []))

    def check(self, session: str) -> None:
        if self.values.get("session") != session:
            raise ValueError(f"secure session {session!r}: this client has no keys for it "
                             "(a new session starts with its key setup)")

    def peer_index(self) -> dict[int, int]:
        return {int(v): i for i, v in enumerate(self.get_list("peers"))}


def _stage_keys(cfg: dict, state: _ClientSession) -> ConfigRecord:
    if state.values:
        raise ValueError(f"secure session {cfg['session']!r}: its keys were made already")
    c_sk, c_pk = generate_key_pairs()
    s_sk, s_pk = generate_key_pairs()
    state.values = {"session": str(cfg["session"]), "c-sk": private_key_to_bytes(c_sk),
                    "s-sk": private_key_to_bytes(s_sk), "last-exchange": 0}
    state.save()
    return ConfigRecord({"c-pk": public_key_to_bytes(c_pk), "s-pk": public_key_to_bytes(s_pk)})


def _stage_shares(cfg: dict, state: _ClientSession, me: int) -> ConfigRecord:
    session = str(cfg["session"])
    state.check(session)
    if "c-sk" not in state.values:
        raise ValueError(f"secure session {session!r}: the shares were already made")
    peers = ids_from_bytes(cfg["peers"])
    if me in peers or len(set(peers)) != len(peers) or not peers:
        raise ValueError("secure session: the server's neighbour list is malformed")
    threshold, live = int(cfg["threshold"]), int(cfg["live-threshold"])
    if not (min(2, len(peers)) <= threshold <= len(peers)):
        raise ValueError(f"secure session: share threshold {threshold} is not within "
                         f"[2, {len(peers)}]")
    if not 2 <= live <= len(peers) + 1:
        raise ValueError(f"secure session: live threshold {live} is not within "
                         f"[2, {len(peers) + 1}]")
    c_sk = bytes_to_private_key(state.values.pop("c-sk"))
    s_sk = bytes_to_private_key(state.values.pop("s-sk"))
    enc_keys, roots = [], []
    for c_pk, s_pk in zip(cfg["c-pks"], cfg["s-pks"], strict=True):
        enc_keys.append(generate_shared_key(c_sk, bytes_to_public_key(c_pk)))
        roots.append(_root(generate_shared_key(s_sk, bytes_to_public_key(s_pk))))
    self_root = os.urandom(32)
    shares = create_shares(self_root, threshold, len(peers))
    ciphertexts = [encrypt(key, _pack_share(me, v, session, share))
                   for v, key, share in zip(peers, enc_keys, shares, strict=True)]
    state.values.update({"peers": peers, "enc-keys": enc_keys, "roots": roots,
                         "self-root": self_root, "held-from": [], "held": [],
                         "live-threshold": live,
                         "pair-revealed": [], "root-revealed": []})
    state.save()
    return ConfigRecord({"to": ids_to_bytes(peers), "ciphertexts": ciphertexts})


def _receive_shares(cfg: dict, state: _ClientSession, me: int) -> None:
    index = state.peer_index()
    keys = state.get_list("enc-keys")
    held_from, held = state.get_list("held-from"), state.get_list("held")
    for src, ciphertext in zip(ids_from_bytes(cfg.get("share-from", b"")),
                               cfg.get("shares", []), strict=True):
        src = int(src)
        if src not in index:
            raise ValueError(f"secure session: a share from node {src}, not a neighbour")
        s, d, session, share = _unpack_share(decrypt(keys[index[src]], ciphertext))
        if (s, d, session) != (src, me, state.values["session"]):
            raise ValueError(f"secure session: the share from node {src} is not for this "
                             "client and session")
        if src not in held_from:
            held_from.append(src)
            held.append(share)
    state.values.update({"held-from": held_from, "held": held})


def _stage_upload(msg: Message, cfg: dict, state: _ClientSession, me: int, context: Context,
                  call_next) -> Message:
    session, exchange = str(cfg["session"]), int(cfg["exchange"])
    state.check(session)
    if exchange <= int(state.values.get("last-exchange", 0)):
        raise ValueError(f"secure session: exchange {exchange} is not new (last "
                         f"{state.values.get('last-exchange')}): a client masks once per "
                         "exchange number")
    _receive_shares(cfg, state, me)
    index = state.peer_index()
    active = ids_from_bytes(cfg.get("active", b""))
    burnt = set(state.get_list("pair-revealed")) | set(state.get_list("root-revealed"))
    if any(v not in index for v in active) or burnt & set(active):
        raise ValueError("secure session: the exchange's neighbours are not this client's "
                         "live neighbours")
    if len(active) + 1 < int(state.values["live-threshold"]):
        raise ValueError(f"secure session: refused: only {len(active)} of this client's "
                         f"neighbours take part (its upload needs "
                         f"{int(state.values['live-threshold']) - 1})")
    base = int(cfg["base"])
    if base < 2 or base & (base - 1) or base > 2**62:
        raise ValueError(f"secure session: digit base {base} is not a power of two <= 2**62")
    state.values.update({"last-exchange": exchange, "active": active,
                         "self-revealed": False})
    state.save()
    del msg.content[SESSION_RECORD]  # the message of our protocol, as the app expects it
    reply = call_next(msg, context)
    if reply.has_error():
        raise RuntimeError(str(reply.error.reason))
    values = reply.content["arrays"].to_numpy_ndarrays() if "arrays" in reply.content else []
    digits, shapes = [], []
    for a in checked_values(values, client_id_of(context)):
        shapes.append(list(a.shape))
        digits.append(encode_fixed(a, base).astype(np.int64).ravel())
    flat = np.concatenate(digits) if digits else np.zeros(0, dtype=np.int64)
    masked = flat.view(np.uint64).copy()
    masked += mask_words(_derive(state.values["self-root"], b"self", session, exchange),
                         flat.size)
    roots = state.get_list("roots")
    for v in active:
        words = mask_words(_derive(roots[index[v]], b"pair", session, exchange), flat.size)
        if me < v:
            masked += words
        else:
            masked -= words
    logger.info("client %d exchange %d (secure session): %d arrays (%d values) go masked "
                "into the sum; its metrics stay on the node", client_id_of(context), exchange,
                len(values),
                sum(int(a.size) for a in values))
    shape_record = {"ndims": [len(s) for s in shapes],
                    "dims": [int(d) for s in shapes for d in s]}
    content = RecordDict({"masked": ArrayRecord([masked]),
                          SESSION_RECORD: ConfigRecord(shape_record)})
    return Message(content, reply_to=msg)


def _stage_reveal(cfg: dict, state: _ClientSession) -> ConfigRecord:
    session, exchange = str(cfg["session"]), int(cfg["exchange"])
    state.check(session)
    if exchange != int(state.values.get("last-exchange", -1)) or state.values.get(
            "self-revealed"):
        raise ValueError(f"secure session: no pair seed of exchange {exchange} is revealed "
                         "now (not the current exchange, or its self seed is already out)")
    index, roots = state.peer_index(), state.get_list("roots")
    active = set(state.get_list("active"))
    dropped = ids_from_bytes(cfg["dropped"])
    if any(v not in active for v in dropped):
        raise ValueError("secure session: a pair seed asked for a node outside the exchange")
    if set(dropped) & set(state.get_list("root-revealed")):
        raise ValueError("secure session: refused: this client gave its share of that "
                         "node's self-mask root")
    if len(active - set(dropped)) + 1 < int(state.values["live-threshold"]):
        raise ValueError(f"secure session: refused: with {len(dropped)} neighbours dropped "
                         f"only {len(active - set(dropped))} remain around this client, "
                         "too few to keep its upload masked")
    seeds = [_derive(roots[index[v]], b"pair", session, exchange) for v in dropped]
    state.values["pair-revealed"] = sorted(set(state.get_list("pair-revealed")) | set(dropped))
    state.values["active"] = sorted(active - set(dropped))
    state.save()
    return ConfigRecord({"dropped": ids_to_bytes(dropped), "seeds": seeds})


def _stage_unmask(cfg: dict, state: _ClientSession) -> ConfigRecord:
    session, exchange = str(cfg["session"]), int(cfg["exchange"])
    state.check(session)
    if exchange != int(state.values.get("last-exchange", -1)):
        raise ValueError(f"secure session: exchange {exchange} is not the current one")
    if len(state.get_list("active")) + 1 < int(state.values["live-threshold"]):
        raise ValueError("secure session: refused: too few neighbours remain around this "
                         "client to send its self seed")
    state.values["self-revealed"] = True
    state.save()
    return ConfigRecord({"seed": _derive(state.values["self-root"], b"self", session,
                                         exchange)})


def _stage_recover(cfg: dict, state: _ClientSession) -> ConfigRecord:
    state.check(str(cfg["session"]))
    held = dict(zip(state.get_list("held-from"), state.get_list("held"), strict=True))
    pair_revealed = set(state.get_list("pair-revealed"))
    nodes, shares = [], []
    for v in ids_from_bytes(cfg["nodes"]):
        if v in held and v not in pair_revealed:
            nodes.append(v)
            shares.append(held[v])
    state.values["root-revealed"] = sorted(set(state.get_list("root-revealed")) | set(nodes))
    state.save()
    return ConfigRecord({"nodes": ids_to_bytes(nodes), "shares": shares})


def answer_session_stage(msg: Message, context: Context, call_next) -> Message:
    """A client's answer to one stage of a secure session (``msg`` has :data:`SESSION_RECORD`)."""
    cfg = dict(msg.content.config_records[SESSION_RECORD])
    stage, me = str(cfg.get("stage")), int(context.node_id)
    state = _ClientSession(context, str(cfg.get("session")))
    if stage == "upload":
        return _stage_upload(msg, cfg, state, me, context, call_next)
    handlers = {"keys": lambda: _stage_keys(cfg, state),
                "shares": lambda: _stage_shares(cfg, state, me),
                "reveal": lambda: _stage_reveal(cfg, state),
                "unmask": lambda: _stage_unmask(cfg, state),
                "recover": lambda: _stage_recover(cfg, state)}
    if stage not in handlers:
        raise ValueError(f"secure session: unknown stage {stage!r}")
    out = handlers[stage]()
    logger.debug("client %d: secure session stage %s", client_id_of(context), stage)
    return Message(RecordDict({SESSION_RECORD: out}), reply_to=msg)


# ------------------------------------------------------------------------- server side
def _size(msg: Message) -> int:
    """Bytes of a reply's arrays and of the byte strings in its config records."""
    size = sum(len(a.data) for record in msg.content.array_records.values()
               for a in record.values())
    for record in msg.content.config_records.values():
        for value in record.values():
            for item in value if isinstance(value, list) else [value]:
                size += len(item) if isinstance(item, bytes) else 8
    return size


@dataclass
class _Exchange:
    """One exchange's bookkeeping on the server."""

    number: int
    nodes: list[int]
    failed: dict[int, str] = field(default_factory=dict)
    received: dict[int, int] = field(default_factory=dict)


class SecureSession:
    """The server side of secure aggregation with keys agreed once per session.

    Parameters
    ----------
    threshold : float, default SECAGG_THRESHOLD (0.6)
        The fraction of a client's neighbours whose shares rebuild its self-mask root
        (:func:`share_threshold`).
    seed : int, default 0
        Seeds the ring order of the neighbour graph.

    :meth:`secure_sum` has the signature and the result of
    :func:`flwr_clustering.secure.secure_sum`; the first call (and a call with a node the
    session does not hold) runs the key setup.
    """

    def __init__(self, threshold: float = SECAGG_THRESHOLD, seed: int = 0) -> None:
        if (problem := secagg_threshold_problem(threshold)) is not None:
            raise ValueError(f"threshold {problem}, got {threshold}")
        self.threshold = float(threshold)
        self.seed = int(seed)
        self.session: str | None = None
        self.members: list[int] = []
        self.peers: dict[int, list[int]] = {}
        self.out: set[int] = set()
        self.exchange = 0
        self.setups = 0
        self._pending: dict[int, list[tuple[int, bytes]]] = {}

    # -- messages
    def _send(self, grid, contents: dict[int, RecordDict], group: int, ex: _Exchange,
              timeout: float | None) -> dict[int, Message]:
        messages = [Message(content, dst_node_id=node, message_type=MessageType.TRAIN,
                            group_id=str(group)) for node, content in contents.items()]
        replies = list(grid.send_and_receive(messages, timeout=timeout)) if messages else []
        ok = {}
        for msg in replies:
            node = int(msg.metadata.src_node_id)
            if node not in contents:
                continue
            if msg.has_error():
                ex.failed.setdefault(node, short_reason(msg.error.reason))
                continue
            ex.received[node] = ex.received.get(node, 0) + _size(msg)
            ok[node] = msg
        for node in contents:
            if node not in ok:
                ex.failed.setdefault(node, "did not reply" if timeout is None
                                     else f"did not reply within {timeout:g} s")
        return ok

    @staticmethod
    def _stage(stage: str, **values) -> RecordDict:
        return RecordDict({SESSION_RECORD: ConfigRecord({"stage": stage, **values})})

    # -- setup
    def usable(self) -> set[int]:
        """The session's clients that may still take part."""
        return set(self.members) - self.out

    def setup(self, grid, nodes: Sequence[int], group: int, ex: _Exchange,
              timeout: float | None) -> None:
        """Key setup for ``nodes``: the ``keys`` and ``shares`` stages."""
        nodes = sorted(int(n) for n in nodes)
        self.setups += 1
        session = os.urandom(8).hex()
        keys = self._send(grid, {n: self._stage("keys", session=session) for n in nodes},
                          group, ex, timeout)
        alive = sorted(keys)
        if len(alive) < 2:
            self._halt(group, ex, len(nodes), "the key setup")
        peers = ring_neighbours(alive, self.seed + self.setups)
        t = {u: share_threshold(len(p), self.threshold) for u, p in peers.items()}
        pks = {u: dict(keys[u].content.config_records[SESSION_RECORD]) for u in alive}
        contents = {u: self._stage(
            "shares", session=session, peers=ids_to_bytes(peers[u]), threshold=t[u],
            **{"live-threshold": live_threshold(len(peers[u]), self.threshold)},
            **{"c-pks": [pks[v]["c-pk"] for v in peers[u]],
               "s-pks": [pks[v]["s-pk"] for v in peers[u]]}) for u in alive}
        shares = self._send(grid, contents, group, ex, timeout)
        self.session, self.members, self.peers = session, alive, peers
        self.out = set(alive) - set(shares)
        self._pending = {u: [] for u in alive}
        for u, reply in shares.items():
            rec = reply.content.config_records[SESSION_RECORD]
            for v, ciphertext in zip(ids_from_bytes(rec["to"]), rec["ciphertexts"],
                                     strict=True):
                if int(v) in self._pending:
                    self._pending[int(v)].append((u, ciphertext))
        logger.info("secure session %s: keys agreed among %d clients (%d neighbours each, "
                    "%s of them rebuild a root); %d failed", session, len(alive) - len(self.out),
                    max((len(p) for p in peers.values()), default=0),
                    sorted(set(t.values())), len(nodes) - len(alive) + len(self.out))

    def _needs_setup(self, nodes: list[int]) -> bool:
        if self.session is None or not set(nodes) <= self.usable():
            return True
        chosen = set(nodes)
        for u in nodes:  # every client must keep enough live neighbours to be rebuilt
            live = [v for v in self.peers[u] if v in chosen]
            peers = len(self.peers[u])
            if len(live) < share_threshold(peers, self.threshold) or \
                    len(live) + 1 < live_threshold(peers, self.threshold):
                return True
        return False

    def _halt(self, group: int, ex: _Exchange, n: int, where: str):
        why = "; ".join(f"node {k}: {r}" for k, r in sorted(ex.failed.items())) or \
            "no reason given"
        raise RuntimeError(
            f"round {group}: secure aggregation halted in {where}: fewer than the threshold "
            f"({self.threshold:g} of {n} clients, at least 2) completed the protocol; "
            f"failed: {why}")

    # -- one exchange
    def secure_sum(self, grid, nodes: Sequence[int], arrays: Sequence[np.ndarray],
                   config: dict[str, Any], *, server_round: int,
                   timeout: float | None = None) -> SecureSum:
        """Send one exchange to ``nodes`` and receive only the sum of their replies.

        As :func:`flwr_clustering.secure.secure_sum`; a session's client that failed
        before is not asked again until the next key setup (which a sampled node outside
        the session's live clients starts).
        """
        nodes = sorted(int(n) for n in nodes)
        if len(nodes) < 2:
            raise ValueError(f"secure aggregation needs at least 2 clients, got {len(nodes)}")
        ex = _Exchange(0, nodes)
        if self._needs_setup(nodes):
            self.setup(grid, nodes, server_round, ex, timeout)
        chosen = sorted(set(nodes) & self.usable())
        if len(chosen) < 2:
            self._halt(server_round, ex, len(nodes), "the key setup")
        self.exchange += 1
        e, session = self.exchange, str(self.session)
        ex.number = e
        base = session_digit_base(len(chosen))
        active = {u: [v for v in self.peers[u] if v in set(chosen)] for u in chosen}
        contents = {}
        for u in chosen:
            pending = self._pending.get(u, [])
            content = self._stage("upload", session=session, exchange=e, base=base,
                                  active=ids_to_bytes(active[u]),
                                  **{"share-from": ids_to_bytes([s for s, _ in pending]),
                                     "shares": [c for _, c in pending]})
            content["arrays"] = ArrayRecord([np.asarray(a) for a in arrays])
            content["config"] = ConfigRecord(dict(config))
            contents[u] = content
        uploads = self._send(grid, contents, server_round, ex, timeout)
        for u in uploads:
            self._pending[u] = []
        masked, shapes = {}, {}
        for u, msg in uploads.items():
            rec = msg.content.config_records[SESSION_RECORD]
            dims, flat = [int(d) for d in rec["dims"]], []
            for nd in (int(x) for x in rec["ndims"]):
                flat.append(tuple(dims[:nd]))
                dims = dims[nd:]
            shapes[u] = flat
            masked[u] = msg.content["masked"].to_numpy_ndarrays()[0].astype(np.uint64)
        levels = digits_for(base)
        for u in list(masked):  # its masked vector must hold its shapes' digits
            expected = levels * sum(int(np.prod(s, dtype=np.int64)) for s in shapes[u])
            if masked[u].ndim != 1 or masked[u].size != expected:
                ex.failed[u] = (f"its masked reply has {masked[u].size} values, not the "
                                f"{expected} digits of its shapes {shapes[u]}")
                del masked[u]
        if masked:  # the shapes most clients sent; a client that differs counts as dropped
            values = [tuple(shapes[u]) for u in masked]
            common = max(set(values), key=lambda s: (values.count(s), s))
            for u in [u for u in masked if tuple(shapes[u]) != common]:
                ex.failed[u] = f"its reply's shapes {shapes[u]} differ from {list(common)}"
                del masked[u]
        survivors = set(masked)
        dropped = set(chosen) - survivors
        pair_seeds: dict[tuple[int, int], bytes] = {}
        new = set(dropped)
        while new:  # reveal: the survivors' pair seeds with the dropped; failures drop too
            asks = {u: sorted(set(active[u]) & new) for u in survivors}
            asks = {u: d for u, d in asks.items() if d}
            replies = self._send(grid, {u: self._stage("reveal", session=session, exchange=e,
                                                       dropped=ids_to_bytes(d))
                                  for u, d in asks.items()},
                                 server_round, ex, timeout)
            new = set(asks) - set(replies)
            for u, msg in replies.items():
                rec = msg.content.config_records[SESSION_RECORD]
                got = dict(zip(ids_from_bytes(rec["dropped"]), rec["seeds"], strict=True))
                if sorted(got) != asks[u] or any(len(bytes(x)) != 32 for x in got.values()):
                    ex.failed[u] = "its pair seeds are not the 32-byte seeds asked for"
                    new.add(u)
                    continue
                for v, seed in got.items():
                    pair_seeds[(u, v)] = bytes(seed)
            survivors -= new
            dropped |= new
        self_seeds = {}
        if len(survivors) >= 2:
            replies = self._send(grid, {u: self._stage("unmask", session=session, exchange=e)
                                        for u in survivors}, server_round, ex, timeout)
            self_seeds = {u: bytes(m.content.config_records[SESSION_RECORD]["seed"])
                          for u, m in replies.items()}
            for u in [u for u, seed in self_seeds.items() if len(seed) != 32]:
                ex.failed[u] = "its self seed is not 32 bytes"
                del self_seeds[u]  # (rebuilt from its root's shares below)
            lost = sorted(survivors - set(self_seeds))
            if lost:
                self_seeds.update(self._recover(grid, lost, survivors, session, e,
                                                server_round, ex, timeout))
        self.out |= set(ex.failed)
        if len(survivors) < max(2, min(share_threshold(len(active[u]) or 1, self.threshold)
                                       for u in chosen)):
            self._halt(server_round, ex, len(chosen), f"exchange {e}")
        size = masked[next(iter(survivors))].size
        total = np.zeros(size, dtype=np.uint64)
        for u in sorted(survivors):
            total += masked[u]
            total -= mask_words(self_seeds[u], size)
        for (u, v), seed in pair_seeds.items():
            if u in survivors:  # the half of the pair mask whose other half never came
                words = mask_words(seed, size)
                if u < v:
                    total -= words
                else:
                    total += words
        signed = total.view(np.int64)
        if signed.size and int(np.abs(signed).max()) > len(survivors) * (base // 2):
            # the masks did not cancel: a seed or a masked vector was not the protocol's
            # (uniform noise over 2**64 falls inside the digits' range with odds <= 2**-11
            # per value): never a wrong total in silence
            raise RuntimeError(
                f"round {server_round}: secure aggregation: the unmasked digit sums lie "
                f"outside the range of {len(survivors)} clients' digits: a client sent a "
                "seed or a masked vector other than the protocol's; no total is used")
        digit_sums = signed.astype(np.float64)  # |sum| <= 2**52: exact
        sums, offset = [], 0
        for shape in shapes[next(iter(survivors))]:
            count = levels * int(np.prod(shape, dtype=np.int64))
            block = digit_sums[offset:offset + count].reshape((levels,) + tuple(shape))
            sums.append(decode_fixed(block, base))
            offset += count
        failed = {n: why for n, why in ex.failed.items() if n not in survivors}
        return SecureSum(sums, sorted(survivors), failed, sum_error_bound(len(chosen)),
                         dict(ex.received))

    def _recover(self, grid, lost: list[int], survivors: set[int], session: str, e: int,
                 group: int, ex: _Exchange, timeout) -> dict[int, bytes]:
        """The self seeds of survivors that did not unmask, from their roots' shares."""
        holders = sorted(survivors - set(lost))
        asks = {h: [u for u in lost if h in self.peers[u]] for h in holders}
        asks = {h: us for h, us in asks.items() if us}
        replies = self._send(grid, {h: self._stage("recover", session=session,
                                                   nodes=ids_to_bytes(us))
                                    for h, us in asks.items()}, group, ex, timeout)
        shares: dict[int, list[bytes]] = {u: [] for u in lost}
        for msg in replies.values():
            rec = msg.content.config_records[SESSION_RECORD]
            for u, share in zip(ids_from_bytes(rec["nodes"]), rec["shares"], strict=True):
                if int(u) in shares:
                    shares[int(u)].append(bytes(share))
        seeds = {}
        for u in lost:
            need = share_threshold(len(self.peers[u]), self.threshold)
            if len(shares[u]) < need:
                ex.failed.setdefault(u, "did not unmask")
                raise RuntimeError(
                    f"round {group}: secure aggregation halted: node {u} uploaded but did "
                    f"not unmask, and only {len(shares[u])} of the {need} shares that "
                    f"rebuild its self mask came back; failed: "
                    + "; ".join(f"node {k}: {r}" for k, r in sorted(ex.failed.items())))
            seeds[u] = _derive(combine_shares(shares[u][:need]), b"self", session, e)
            self.out.add(u)
            logger.warning("secure session %s exchange %d: node %d did not unmask; its self "
                           "mask was rebuilt from %d neighbours' shares; it takes no further "
                           "part in this session", session, e, u, need)
        return seeds
