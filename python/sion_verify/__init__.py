"""Check sion_memory proofs in your own process.

A sion_memory node answers "what was seen in this box, during this interval" with a proof.
Asking the node to check its own proof proves nothing; this package checks it here, against
a ledger key you chose, and checks that it answers the question you asked::

    import sion_verify
    answer = sion_verify.verify(bytes(response.proof), ledger_key,
                                frame="map", box_m=(0, 0, -1, 5, 5, 3),
                                from_time=request.from_time, to_time=request.to_time)
    for atom in answer["atoms"]:
        print(atom["position"], atom["kind"], atom["min"], atom["max"])

`verify` returns what the proof proves, or raises ProofError with the reason. The proof
format and the verification algorithm are specified in the repository's docs/PROOFS.md.

What a reader believes about atoms (docs/BELIEF.md) is checked the same way: `believe` takes a
belief bundle (the node's /sion_memory/believe answer carries one), the ledger key you chose and
your own policy, and recomputes the fold here::

    beliefs = sion_verify.believe(bytes(response.bundle), ledger_key, [atom_id], my_policy)
"""

import datetime
import json
import stat

import os

from ._sion_verify import (box_from_metres, check_bundle_json, check_evidence_json, check_fleet_json, frame_name, parse_box,
                           parse_duration, parse_time, seconds_to_ns, verify_json)

__all__ = ["BundleError", "ProofError", "believe", "box_from_metres", "check_evidence", "check_fleet", "frame_name",
           "parse_box", "parse_duration", "parse_time", "seconds_to_ns", "time_ns", "verify"]


def time_ns(value, *, end=False, name="time"):
    """A point in time in nanoseconds since the Unix epoch (docs/UNITS.md), from any of:
    a ROS Time (builtin_interfaces.msg.Time: sec, nanosec; or rclpy.time.Time), a timezone-aware
    datetime, text (RFC 3339 "2026-01-01T14:00:00Z", seconds with their unit "1767225600.5s",
    or bare nanoseconds), or an int (nanoseconds). A float is refused: seconds or nanoseconds?
    Write seconds as text ("1767225600.5s") or use seconds_to_ns. `end`: an interval's end,
    rounded up below a nanosecond (a start rounds down)."""
    if isinstance(value, bool):
        raise ValueError(f"{name}: {value!r} is not a time")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        return parse_time(value, end)
    if isinstance(value, float):
        raise ValueError(f"{name}: {value!r} is a float: seconds or nanoseconds? write seconds as "
                         f"\"{value!r}s\" (or seconds_to_ns({value!r}))")
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            raise ValueError(f"{name}: {value!r} has no time zone: which instant? (datetime.timezone.utc)")
        return parse_time(value.isoformat(), end)
    nanoseconds = getattr(value, "nanoseconds", None)  # rclpy.time.Time
    if isinstance(nanoseconds, int):
        return nanoseconds
    sec, nanosec = getattr(value, "sec", None), getattr(value, "nanosec", None)  # builtin_interfaces Time
    if isinstance(sec, int) and isinstance(nanosec, int):
        if not 0 <= nanosec < 1_000_000_000:
            raise ValueError(f"{name}: nanosec {nanosec} is not below 1,000,000,000")
        return sec * 1_000_000_000 + nanosec
    raise ValueError(f"{name}: {value!r} is not a time (a ROS Time, a datetime, text or int nanoseconds)")


class BundleError(ValueError):
    """The belief bundle does not show the fold asked for (docs/BELIEF.md, "Bundles"): a proof
    in it does not verify, a trusted reviser's log or a link proof is missing, its heads are
    older than asked, ...; the message says which. `code` names the kind of refusal
    (docs/BELIEF.md, "Checking"): format, proof, unattested, mixed_heads, stale, no_log,
    missing_log, unchained, missing_links, missing_time."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


class ProofError(ValueError):
    """The proof does not prove what was asked. `code` names the kind of refusal
    (docs/PROOFS.md, "Refusals": format, atom, merkle, attestation, wrong_ledger, unattested,
    range, list, index_root, other_question, stale_head, ...); the message says why."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


def _key_bytes(ledger_key, name="ledger_key"):
    if isinstance(ledger_key, str):
        try:
            key = bytes.fromhex(ledger_key)
        except ValueError:
            raise ValueError(f"{name}: not hex digits") from None
    else:
        key = bytes(ledger_key)
    if len(key) != 32:
        raise ValueError(f"{name}: {len(key)} bytes, not 32 (64 hex digits)")
    return key


def verify(proof, ledger_key, *, frame=None, box=None, from_ns=None, to_ns=None,
           box_m=None, from_time=None, to_time=None, subject=None, links_to=None, position=None, omitted=None, extends=None,
           recorded=None, latest=None, nearest=None, count=None, cell_omitted=None, kinds=None, at_least=0,
           head=None, log=None, witnesses=None, quorum=None, cosigners=None, cosigners_quorum=None):
    """Verify a proof file's bytes; return what it proves, or raise ProofError.

    ledger_key: the ledger's ed25519 public key (32 bytes or 64 hex digits) you trust; the proof
        must carry that ledger's attestation of its head. It is never taken from the proof.
    The question you asked, which the proof must answer exactly (a valid proof for a smaller box,
    a shorter interval or another subject is refused):
        frame, box, from_ns, to_ns: a range query: a frame ("/map" is "map", as in tf2),
            (x0, y0, z0, x1, y1, z1) in mm with both corners included (or the command line's text,
            "0m,0m,-1m,5m,5m,3m"), and [from_ns, to_ns) in ns (from_ns == to_ns: that instant);
        box_m: the box's corners in metres instead (floats, rounded outward to millimetres);
        kinds: with a range question, the kinds of atom it is about ("observation", "pose", …;
            docs/ATOM.md), when not every kind; a latest question names them as "kinds" in its
            dict;
        from_time, to_time: the interval's ends in any form time_ns takes (a ROS Time, a datetime,
            RFC 3339 or "1767225600.5s" text) instead of from_ns, to_ns;
        subject: every atom about a subject; with frame, the range question's subject: only
            atoms about it ("pallet-17"; a latest or count question names it as "subject" in
            its dict);
        links_to: every atom linking to an atom id (64 hex digits);
        position: the atom at a position (an inclusion proof);
        omitted: the position an omission proof convicts the writer's index of leaving out;
        extends: (size, root as 64 hex digits) of an earlier head the log extends (consistency);
        recorded: the position a transaction-time proof says when was recorded (its Pulse and
            the ledger's time are in `pulse`);
        latest: {"frame", "box", "from_ns", "to_ns"} (and "kinds"): the atom seen last in that box and
            interval (its valid time ends last; the later position on a tie), or none;
        nearest: {"frame", "point": (x, y, z) mm, "from_ns", "to_ns", "k"}: the k atoms of the
            frame valid during the interval nearest to the point (distance from the point to the
            atom's box), nearest first; `claim["nearest"]["distances_mm"]` gives each distance.
        count: {"frame", "box", "from_ns", "to_ns"} (and "kinds"): how many atoms answer that
            range question, for how long in all, first and last when (`claim["count"]`).
        cell_omitted: the position of an atom a cell omission proof shows in a map cell the
            ledger's cells leave the log out of: its writer broke the cells rule (docs/PROOFS.md,
            kind 10; the cell is `claim["cell_omitted"]["cell"]`).
    at_least: the head must hold at least this many atoms (refuses an older answer).
    head: (size, root as 64 hex digits) of exactly the head the proof must answer as of (a head
        you hold; another is refused with other_head).
    log: the log id the proof must be about.
    witnesses: the witness public keys you trust (64 hex digits or 32 bytes each); with them,
        quorum (default: all of them) must have cosigned the attested Pulse, and the proof file
        must carry their cosignatures.
    cosigners: the C2SP witnesses you trust, as their cosignature/v1 verifier keys
        ("name+keyid+base64key", as `sion ledger witness` prints them); with them,
        cosigners_quorum (default: all of them) must have cosigned the checkpoint of the
        ledger's history the proof file carries covering its Pulse (docs/PROOFS.md, "Covered by
        a checkpoint").

    Returns a dict: kind, statement (one sentence), log, head (size, root, index, manifest in
    hex), pulse (number, time_ns, ledger_key), cosigned_by (witness keys, hex), checkpoint (the
    C2SP checkpoint covering the Pulse: size and note; None when the file carries none), claim (as `sion memory verify --json` prints it)
    and atoms: the answer's atoms in their JSON form (docs/ATOM.md) with their positions.
    """
    expect = _expectation(frame=frame, box=box, from_ns=from_ns, to_ns=to_ns, box_m=box_m, from_time=from_time,
                          to_time=to_time, subject=subject, links_to=links_to, position=position, omitted=omitted,
                          extends=extends, recorded=recorded, latest=latest, nearest=nearest, count=count,
                          cell_omitted=cell_omitted, kinds=kinds,
                          at_least=at_least, head=head, log=log, witnesses=witnesses, quorum=quorum,
                          cosigners=cosigners, cosigners_quorum=cosigners_quorum)
    return _verified(verify_json(bytes(proof), _key_bytes(ledger_key), json.dumps(expect)))


def _expectation(*, frame=None, box=None, from_ns=None, to_ns=None, box_m=None, from_time=None, to_time=None,
                 subject=None, links_to=None, position=None, omitted=None, extends=None, recorded=None, latest=None,
                 nearest=None, count=None, cell_omitted=None, kinds=None, at_least=0, head=None, log=None,
                 witnesses=None, quorum=None, cosigners=None, cosigners_quorum=None):
    """The question asked (verify()'s keyword arguments) as the verifier's expectation."""
    if isinstance(kinds, str):
        kinds = [kinds]
    if frame is None and any(v is not None for v in (box, box_m, from_ns, to_ns, from_time, to_time, kinds)):
        raise ValueError("box, from_ns and to_ns belong to a range question: name its frame too")
    if box is not None and box_m is not None:
        raise ValueError("give the box once: box (millimetres, or text with units) or box_m (metres)")
    if box_m is not None:
        box = box_from_metres([float(v) for v in box_m])
    elif isinstance(box, str):
        box = parse_box(box)
    for given, ns, name in ((from_time, from_ns, "from"), (to_time, to_ns, "to")):
        if given is not None and ns is not None:
            raise ValueError(f"give {name} once: {name}_time or {name}_ns")
    if from_time is not None:
        from_ns = time_ns(from_time, name="from_time")
    if to_time is not None:
        to_ns = time_ns(to_time, end=True, name="to_time")
    if frame is not None:
        frame = frame_name(frame)
    # With a frame, a subject filters the range question; alone, it is the subject question.
    asked = sum(v is not None for v in (frame, None if frame is not None else subject, links_to, position,
                                        omitted, extends, recorded, latest, nearest, count, cell_omitted))
    if asked > 1:
        raise ValueError("ask one question: a range (frame, box, interval), a subject, links_to, "
                         "a position, omitted, extends, recorded, latest, nearest, count or cell_omitted")
    def box_question(q):
        q = dict(q)
        if isinstance(q.get("box"), str):
            q["box"] = parse_box(q["box"])
        q["box"] = list(q["box"]) if q.get("box") is not None else None
        q["frame"] = frame_name(q["frame"]) if q.get("frame") is not None else None
        if isinstance(q.get("kinds"), str):
            q["kinds"] = [q["kinds"]]
        return q

    if latest is not None:
        latest = box_question(latest)
    if count is not None:
        count = box_question(count)
    if nearest is not None:
        nearest = dict(nearest)
        nearest["point"] = list(nearest["point"]) if nearest.get("point") is not None else None
        nearest["frame"] = frame_name(nearest["frame"]) if nearest.get("frame") is not None else None
    expect = {
        "frame": frame,
        "box": list(box) if box is not None else None,
        "from_ns": from_ns,
        "to_ns": to_ns,
        "kinds": list(kinds) if kinds is not None else None,
        "subject": subject,
        "links_to": links_to,
        "position": position,
        "omitted": omitted,
        "recorded": recorded,
        "latest": latest,
        "nearest": nearest,
        "count": count,
        "cell_omitted": cell_omitted,
        "extends": {"size": extends[0], "root": extends[1]} if extends is not None else None,
        "at_least": at_least,
        "head": {"size": head[0], "root": head[1]} if head is not None else None,
        "log": log,
    }
    if witnesses is not None:
        expect["witnesses"] = [_key_bytes(w, f"witnesses[{i}]").hex() for i, w in enumerate(witnesses)]
        expect["quorum"] = quorum
    elif quorum is not None:
        raise ValueError("quorum counts witnesses: name them (witnesses=...)")
    if cosigners is not None:
        if isinstance(cosigners, str):
            raise ValueError("cosigners: a list of C2SP verifier keys, not one string")
        expect["cosigners"] = [str(c) for c in cosigners]
        expect["cosigners_quorum"] = cosigners_quorum
    elif cosigners_quorum is not None:
        raise ValueError("cosigners_quorum counts C2SP witnesses: name them (cosigners=...)")
    return expect


def _verified(answer):
    outcome = json.loads(answer)
    if "error" in outcome:
        raise ProofError(outcome["error"]["code"], outcome["error"]["message"])
    verified = outcome["ok"]
    if "blobs" in outcome:
        verified["blobs_checked"] = outcome["blobs"]
    claim = verified["claim"]
    (body,) = claim.values()
    atoms = body.get("atoms")
    if atoms is None and body.get("atom") is not None:
        atoms = [body["atom"]]
    verified["atoms"] = atoms or []
    return verified


def check_evidence(directory, ledger_key, **question):
    """Check an evidence directory (`sion memory evidence`, docs/EVIDENCE.md): its
    answer.sionproof as verify() does (ledger_key and the question asked, as verify takes them),
    and that each file of its blobs/ is exactly the payload the atom it is named for commits
    to. Returns what the proof proves, with `blobs_checked`; raises ProofError (codes
    `evidence_*` for the payloads) when it does not hold."""
    with open(os.path.join(directory, "answer.sionproof"), "rb") as f:
        proof = f.read(64 * 1024 * 1024 + 1)
    # The proof first: what it proves says which payloads may be here and how large each is,
    # so nothing else is read whole before it is known to be one (no link, pipe or huge file).
    answer = verify(proof, ledger_key, **question)
    sizes = {a["position"]: a["payload"]["blob"]["size"] for a in answer["atoms"]
             if isinstance(a.get("payload"), dict) and "blob" in a["payload"]}
    blobs_dir = os.path.join(directory, "blobs")
    blobs = []
    if os.path.isdir(blobs_dir):
        for name in sorted(os.listdir(blobs_dir)):
            path = os.path.join(blobs_dir, name)
            if not stat.S_ISREG(os.lstat(path).st_mode):
                raise ProofError("evidence_name", f"blobs/{name}: not a regular file (a link, a directory or a device)")
            size = sizes.get(int(name)) if name.isdigit() else None
            if size is not None and os.lstat(path).st_size != size:
                raise ProofError("evidence_hash", f"blobs/{name}: {os.lstat(path).st_size} bytes, not the {size} "
                                 f"bytes the atom at position {name} commits to")
            # A name that is no atom's is read empty: the verifier refuses it by its name.
            with open(path, "rb") as f:
                blobs.append((name, f.read(size) if size is not None else b""))
    expect = _expectation(**question)
    return _verified(check_evidence_json(proof, _key_bytes(ledger_key), json.dumps(expect), blobs))


def check_fleet(bundle, ledger_key, *, group=None, **question):
    """Check a fleet recall bundle's bytes (`sion fleet recall`, docs/PROOFS.md, "Fleet
    recall"): one range question answered by every log of a fleet ledger (or of `group`, an
    agent name, and those under it) as of one Pulse, complete across robots. Raises ProofError
    (codes left_out, stale, lying, state_root, signature, not_asked, malformed) when a robot was
    left out, answered as of an older head, or answered otherwise than the question asked.

    ledger_key: the ledger's ed25519 public key (32 bytes or 64 hex digits) you trust.
    question: the range question, as verify() takes it (frame, box or box_m, from_ns and to_ns
        or from_time and to_time, and optionally kinds, subject).

    Returns a dict: pulse, time_ns, in_scope (how many logs the question covered), logs (each
    answering log's id, agent and atoms in their JSON form with positions) and atoms (all of
    them, with the log's id as "log").
    """
    expect = _expectation(**question)
    outcome = json.loads(check_fleet_json(bytes(bundle), _key_bytes(ledger_key), json.dumps(expect), group))
    if "error" in outcome:
        raise ProofError(outcome["error"]["code"], outcome["error"]["message"])
    answer = outcome["ok"]
    answer["atoms"] = [dict(atom, log=entry["log"]) for entry in answer["logs"] for atom in entry["atoms"]]
    return answer


def believe(bundle, ledger_key, targets, policy, *, as_of=None, trust_log_set=False):
    """Check a belief bundle's bytes and recompute what a reader believes; raise BundleError if
    the bundle does not show it.

    ledger_key: the ledger's ed25519 public key (32 bytes or 64 hex digits) you trust.
    targets: the atoms asked about, by id (64 hex digits each).
    policy: your policy (a dict or its JSON): {"revisers": [{"name", "key", "rank"}],
        "prefer": "latest" | "rank" | {"quorum": k}} (docs/BELIEF.md, "Policies").
    as_of: the oldest Pulse you accept the bundle's heads at (the latest you know of). Without
        it staleness is not checked, and the answer's "staleness" is None to say so.
    trust_log_set: for revisers on a ledger from before log chains, take the logs the bundle
        brings as all of theirs (refused otherwise, code "unchained"; docs/BELIEF.md).

    Returns a dict: pulse; beliefs: per target, in the order asked, its id (target), its
    state and the statements that decided it (decided_by) and that stand (standing);
    staleness: the Pulse the heads were checked against, or None (not checked); logs: per
    trusted reviser, its key (reviser), its logs and whether they are proved all its logs.
    """
    if isinstance(policy, str):
        policy_json = policy
    else:
        policy_json = json.dumps(policy)
    outcome = json.loads(
        check_bundle_json(
            bytes(bundle), _key_bytes(ledger_key), list(targets), policy_json, as_of, bool(trust_log_set)
        )
    )
    if "error" in outcome:
        raise BundleError(outcome["error"]["code"], outcome["error"]["message"])
    return outcome["ok"]
