#!/usr/bin/env python3
"""Seeds for the bag, chunk, ingest, atom_json and store_open fuzz targets, cut from a small
synthetic bag and a simulated run made by the `sion` binary.

    cargo build --release --bin sion && python3 fuzz/seeds/make_inputs.py [path/to/sion]
"""
import os, struct, subprocess, sys, tempfile, zlib

here = os.path.dirname(os.path.abspath(__file__))
sion = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, '..', '..', 'target', 'release', 'sion')
STREAMS = ['/pose', '/odom', '/tf', '/tf_static', '/map', '/camera/image_raw',
           '/camera/image_raw/compressed', '/camera/camera_info']


def records(buf, at):
    """(opcode, body) of each MCAP record from `at` to the end."""
    while at + 9 <= len(buf):
        op, n = buf[at], struct.unpack_from('<Q', buf, at + 1)[0]
        yield op, buf[at + 9:at + 9 + n]
        at += 9 + n


def string(b, at):
    n = struct.unpack_from('<I', b, at)[0]
    return b[at + 4:at + 4 + n].decode(), at + 4 + n


def write(kind, name, data):
    with open(os.path.join(here, kind, name), 'wb') as f:
        f.write(data)


with tempfile.TemporaryDirectory() as tmp:
    for compressed in (True, False):
        bag = os.path.join(tmp, 'b.mcap')
        args = [sion, 'bag', 'synth', '--seconds', '1', '--camera', '8x8', '--camera-hz', '2', '--out', bag]
        subprocess.run(args + ([] if compressed else ['--uncompressed']), check=True, capture_output=True)
        buf = open(bag, 'rb').read()
        if compressed:
            write('bag', 'synth-1s-zstd.mcap', buf)
        topics, chunk_no, seen = {}, 0, set()
        for op, body in records(buf, 8):
            if op != 0x06:
                continue
            start, end, usize, crc = struct.unpack_from('<QQQI', body, 0)
            comp, at = string(body, 28)
            n = struct.unpack_from('<Q', body, at)[0]
            data = body[at + 8:at + 8 + n]
            pick = {'': 0, 'zstd': 1, 'lz4': 2}[comp]
            write('chunk', f'{comp or "none"}-{chunk_no}.bin', bytes([pick]) + struct.pack('<QI', usize, crc) + data)
            chunk_no += 1
            if comp:
                continue
            for iop, ibody in records(data, 0):
                if iop == 0x04:
                    cid = struct.unpack_from('<H', ibody, 0)[0]
                    topics[cid], _ = string(ibody, 4)
                elif iop == 0x05:
                    cid = struct.unpack_from('<H', ibody, 0)[0]
                    topic = topics.get(cid)
                    if topic in STREAMS and topic not in seen:
                        seen.add(topic)
                        i = STREAMS.index(topic)
                        write('ingest', topic.strip('/').replace('/', '-') + '.bin', bytes([i]) + ibody[22:])
    atoms = subprocess.run([sion, 'sim', '--atoms', '40'], check=True, capture_output=True).stdout.splitlines()
    for i in (0, 1, 7, 20, 39):
        write('atom_json', f'sim-{i}.json', atoms[i] + b'\n')
# store_open: no damage; a byte of the first segment flipped; the ledger journal cut short; the
# offsets deleted (file numbers index the sorted file list of the target's template memory).
write('store_open', 'none.bin', b'')
for f in range(12):
    write('store_open', f'flip-file-{f}.bin', bytes([f, 0]) + struct.pack('<I', 200) + bytes([1, 0x40]))
    write('store_open', f'cut-file-{f}.bin', bytes([f, 1]) + struct.pack('<I', 100) + bytes([0]))
    write('store_open', f'delete-file-{f}.bin', bytes([f, 3]) + struct.pack('<I', 0) + bytes([0]))
for kind in ('bag', 'chunk', 'ingest', 'atom_json', 'store_open'):
    names = os.listdir(os.path.join(here, kind))
    print(f'{kind}: {len(names)} seeds, {sum(os.path.getsize(os.path.join(here, kind, n)) for n in names)} bytes')
