#!/usr/bin/env python3
"""Ask the sion_memory node what it remembers, with proof (rclpy).

    python3 scripts/ask.py range --frame map --box 0m,0m,-1m,5m,5m,3m --from TIME --to TIME [--as-of SIZE] [--out FILE]
    python3 scripts/ask.py range --frame map --box 0m,0m,-1m,5m,5m,3m --last 10min
    python3 scripts/ask.py subject SUBJECT [--out FILE]
    python3 scripts/ask.py commit

A box's values carry their unit (0m,0m,-1m,5m,5m,3m; bare integers are millimetres); times are
RFC 3339 (2026-01-01T14:00:00Z), seconds with their unit (1767225600.5s) or bare nanoseconds
(docs/UNITS.md). The node is asked through its ~/recall service, in metres and ROS Time; what it
says about a question that cannot match (an unknown frame, an interval outside what it holds) is
printed as a warning. Every answer's proof is checked here,
in this process, by the sion_verify package (`pip install ./python`): against the ledger key you
name with --ledger-key (or SION_LEDGER_KEY), and against the question asked, so a valid proof
for a smaller box or an older head is refused. Without a key, the key the node publishes on its
head is used, and ask.py says that this trusts the node's word. --out FILE keeps the proof for
`sion memory verify FILE`.
"""

import argparse
import datetime
import os
import sys
import time

import rclpy
from builtin_interfaces.msg import Time
from geometry_msgs.msg import Point
from sion_memory_msgs.srv import Commit, Count, LastSeen, Nearest, QueryRange, QuerySubject, Recall, Verify

try:
    import sion_verify
    MISSING = None
except ImportError as e:  # pragma: no cover - says how to get it
    sion_verify = None
    MISSING = e

# What a refused proof raises; nothing is caught as one without the package (main() says so
# before asking anything).
ProofError = sion_verify.ProofError if sion_verify is not None else ()

TIMEOUT_S = 30.0
# The node's full name: its services are NODE/query_range, … (/NS/sion_memory under a namespace).
NODE = '/sion_memory'


def call(node, kind, name, request):
    client = node.create_client(kind, name)
    if not client.wait_for_service(timeout_sec=TIMEOUT_S):
        raise SystemExit(f'ask: {name} is not available (is the node running?)')
    future = client.call_async(request)
    rclpy.spin_until_future_complete(node, future, timeout_sec=TIMEOUT_S)
    if future.result() is None:
        raise SystemExit(f'ask: {name} did not answer within {TIMEOUT_S:.0f} s')
    return future.result()


def stamp(ns):
    return Time(sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000)


def ns(t):
    """A builtin_interfaces/Time as nanoseconds."""
    return t.sec * 1_000_000_000 + t.nanosec


def query_range(node, frame, box, from_ns, to_ns, as_of=0, peer=NODE):
    request = QueryRange.Request()
    request.frame_id, request.min_mm, request.max_mm = frame, list(box[:3]), list(box[3:])
    request.from_time, request.to_time, request.as_of_size = stamp(from_ns), stamp(to_ns), as_of
    return call(node, QueryRange, f'{peer}/query_range', request)


def recall(node, frame, box_mm, from_ns, to_ns, as_of=0, peer=NODE):
    """~/recall: the box asked in metres (millimetres / 1000 print and read back exactly)."""
    request = Recall.Request()
    request.frame_id = frame
    request.min = Point(x=box_mm[0] / 1000, y=box_mm[1] / 1000, z=box_mm[2] / 1000)
    request.max = Point(x=box_mm[3] / 1000, y=box_mm[4] / 1000, z=box_mm[5] / 1000)
    request.from_time, request.to_time, request.as_of_size = stamp(from_ns), stamp(to_ns), as_of
    return call(node, Recall, f'{peer}/recall', request)


def query_subject(node, subject, as_of=0, peer=NODE):
    request = QuerySubject.Request()
    request.subject, request.as_of_size = subject, as_of
    return call(node, QuerySubject, f'{peer}/query_subject', request)


def verify_by_node(node, proof, peer=NODE):
    """The node's own /sion_memory/verify: a convenience, never a reason to trust an answer
    (the writer would be vouching for its own proof)."""
    request = Verify.Request()
    request.proof = bytes(proof)
    return call(node, Verify, f'{peer}/verify', request)


def verify(answer, ledger_key, at_least=0, **question):
    """Check an answer's proof here, against `ledger_key` and the question asked (keyword
    arguments of sion_verify.verify); returns what it proves or raises sion_verify.ProofError.
    at_least: the smallest head the reader accepts an answer as of."""
    if sion_verify is None:
        raise SystemExit(missing_package())
    return sion_verify.verify(bytes(answer.proof), ledger_key, at_least=at_least, **question)


def commit(node, peer=NODE):
    return call(node, Commit, f'{peer}/commit', Commit.Request())


def show_answer(answer, proof_path, ledger_key, question):
    if not answer.ok:
        print(f'refused: {answer.error}')
        return 1
    for warning in getattr(answer, 'warnings', []):
        print(f'warning: {warning}')
    head = answer.head
    print(f'as of head {head.size} atoms (root {bytes(head.root).hex()[:16]}…, Pulse {head.pulse}): '
          f'{len(answer.atoms)} atoms, proof {len(answer.proof)} bytes')
    kinds = {}
    for atom in answer.atoms:
        kinds[atom.kind] = kinds.get(atom.kind, 0) + 1
    for atom in answer.atoms[:8]:
        print(f'  #{atom.position:<6} {atom.kind:<12} {atom.subject or "-":<10} '
              f'[{",".join(map(str, atom.min_mm))}]..[{",".join(map(str, atom.max_mm))}] mm  '
              f't={atom.from_ns}')
    if len(answer.atoms) > 8:
        print(f'  … and {len(answer.atoms) - 8} more (' + ', '.join(f'{n} {k}' for k, n in sorted(kinds.items())) + ')')
    if ledger_key is None:
        ledger_key = bytes(answer.head.ledger_key).hex()
        print(f'(checking against the ledger key the node itself publishes, {ledger_key[:16]}…: '
              'that trusts the node\'s word; pass --ledger-key)')
    try:
        checked = verify(answer, ledger_key, **question)
    except ProofError as refused:
        print(f'INVALID proof ({refused.code}): {refused}')
        return 1
    print(f'VALID {checked["kind"]} proof, checked here: {checked["statement"]}')
    asked = checked['claim'].get('range')
    if asked:
        print(f'  asked   {in_metres_and_utc(asked)}')
    if proof_path:
        with open(proof_path, 'wb') as f:
            f.write(bytes(answer.proof))
        print(f'proof written to {proof_path} (check it offline: sion memory verify --ledger-key {ledger_key} {proof_path})')
    return 0


def in_metres_and_utc(q):
    """A range question as people say it: the box in metres, the interval in UTC."""
    def metres(mm):  # exact: whole millimetres, as metres
        sign, mm = ('-' if mm < 0 else ''), abs(mm)
        return f'{sign}{mm // 1000}' + (f'.{mm % 1000:03d}'.rstrip('0') if mm % 1000 else '')

    def utc(ns):
        return datetime.datetime.fromtimestamp(ns // 10**9, datetime.timezone.utc).strftime('%Y-%m-%dT%H:%M:%S') + \
            f'.{ns % 10**9 // 10**6:03d}Z'
    corner = ', '.join
    return (f'frame "{q["frame"]}", [{corner(map(metres, q["min"]))}]..[{corner(map(metres, q["max"]))}] m, '
            f'{utc(q["from"])} .. {utc(q["to"])} (UTC)')


def missing_package():
    """Why the answer cannot be checked here, and how to make it so."""
    return (f'ask: the sion_verify package is not installed for {sys.executable} ({MISSING}): install it '
            f'with `{sys.executable} -m pip install ./python` from the repository (scripts/test.sh installs it there)')


def range_question(args):
    """The box (mm) and interval (ns) asked, read by sion_verify's parser (docs/UNITS.md); a
    value it cannot read stops here, naming the argument."""
    try:
        box = list(sion_verify.parse_box(args.box))
    except ValueError as e:
        raise SystemExit(f'ask: --box: {e}') from None
    try:
        to_ns = sion_verify.parse_time(args.to_text, True) if args.to_text else None
        from_ns = sion_verify.parse_time(args.from_text) if args.from_text else None
        if args.last:
            if from_ns is not None:
                raise SystemExit('ask: give --from or --last, not both')
            if to_ns is None:
                to_ns = time.time_ns()
            from_ns = to_ns - sion_verify.parse_duration(args.last)
    except ValueError as e:
        raise SystemExit(f'ask: {e}') from None
    if from_ns is None or to_ns is None:
        raise SystemExit('ask: give --from and --to, or --last')
    return box, from_ns, to_ns


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--ledger-key', default=os.environ.get('SION_LEDGER_KEY'),
                        help='the ledger key you trust (64 hex digits); default: $SION_LEDGER_KEY')
    parser.add_argument('--peer', default=NODE,
                        help=f'the node asked, by its full name (default {NODE}; /NS/sion_memory under a namespace)')
    sub = parser.add_subparsers(dest='command', required=True)
    r = sub.add_parser('range', help='what was seen in this box, during this interval')
    r.add_argument('--frame', default='map', help='the frame the box is in (/map is map, as in tf2)')
    r.add_argument('--box', required=True, help='X0,Y0,Z0,X1,Y1,Z1, each with its unit (0m,0m,-1m,5m,5m,3m); bare integers are mm')
    r.add_argument('--from', dest='from_text', help='RFC 3339, seconds with their unit (1767225600.5s) or nanoseconds')
    r.add_argument('--to', dest='to_text', help='as --from (excluded) [default with --last: now]')
    r.add_argument('--last', help='the last DURATION up to --to or now: 10min, 1.5s, 2h')
    r.add_argument('--as-of', type=int, default=0, help='a committed head size (default: the latest)')
    r.add_argument('--out', '--proof', dest='proof', help='write the proof to this file (--proof: the old name)')
    s = sub.add_parser('subject', help='every claim about a subject')
    s.add_argument('subject')
    s.add_argument('--as-of', type=int, default=0)
    s.add_argument('--out', '--proof', dest='proof', help='write the proof to this file')
    sub.add_parser('commit', help='commit the head now')
    args = parser.parse_args()
    # Checked before anything is asked: an answer that cannot be checked here is not shown.
    if args.command in ('range', 'subject') and sion_verify is None:
        raise SystemExit(missing_package())

    rclpy.init()
    node = rclpy.create_node('sion_ask')
    try:
        if args.command == 'range':
            box, from_ns, to_ns = range_question(args)
            frame = sion_verify.frame_name(args.frame)
            answer = recall(node, frame, box, from_ns, to_ns, args.as_of, peer=args.peer)
            question = dict(frame=frame, box=box, from_ns=from_ns, to_ns=to_ns, at_least=args.as_of)
            return show_answer(answer, args.proof, args.ledger_key, question)
        if args.command == 'subject':
            answer = query_subject(node, args.subject, args.as_of, peer=args.peer)
            return show_answer(answer, args.proof, args.ledger_key, dict(subject=args.subject, at_least=args.as_of))
        answer = commit(node, peer=args.peer)
        if not answer.ok:
            print(f'refused: {answer.error}')
            return 1
        print(f'committed: {answer.head.size} atoms at Pulse {answer.head.pulse}, root {bytes(answer.head.root).hex()}')
        return 0
    finally:
        node.destroy_node()
        rclpy.shutdown()


if __name__ == '__main__':
    sys.exit(main())
