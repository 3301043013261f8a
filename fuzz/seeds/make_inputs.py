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


class Cdr:
    """A little-endian CDR message, aligned from the end of its 4-byte header."""

    def __init__(self):
        self.b = bytearray(b'\x00\x01\x00\x00')

    def put(self, fmt, *v):
        n = struct.calcsize('<' + fmt.lstrip('0123456789')[0])
        self.b += bytes((-(len(self.b) - 4)) % n)
        self.b += struct.pack('<' + fmt, *v)
        return self

    def string(self, s):
        return self.put('I', len(s) + 1).raw(s.encode() + b'\0')

    def raw(self, data):
        self.b += data
        return self

    def header(self, sec, frame):
        return self.put('i', sec).put('I', 0).string(frame)


# The sensors the bag above lacks, picked by their place in Stream::ALL (after the eight above).
scan = Cdr().header(5, 'laser').put('7f', -1.5, 1.5, 1.5, 0, 0, 0.1, 8).put('I', 3).put('3f', 1, float('inf'), 2)
scan.put('I', 0)
write('ingest', 'scan.bin', bytes([8]) + scan.b)
cloud = Cdr().header(5, 'laser').put('I', 1).put('I', 2).put('I', 3)
for i, name in enumerate('xyz'):
    cloud.string(name).put('I', 4 * i).put('B', 7).put('I', 1)
cloud.put('B', 0).put('I', 12).put('I', 24).put('I', 24).put('6f', 1, 0, 0, 2, 1, -0.5).put('B', 1)
write('ingest', 'cloud.bin', bytes([9]) + cloud.b)
imu = Cdr().header(5, 'imu').put('4d', 0, 0, 0, 1).put('9d', *[0] * 9).put('3d', 0, 0, 0.2).put('9d', *[0] * 9)
imu.put('3d', 0, 0, 9.8).put('9d', *[0] * 9)
write('ingest', 'imu.bin', bytes([10]) + imu.b)
fix = Cdr().header(5, 'gps').put('b', 0).put('H', 1).put('3d', 48.1, 11.5, 520).put('9d', *[4, 0, 0, 0, 4, 0, 0, 0, 9])
fix.put('B', 2)
write('ingest', 'gnss.bin', bytes([11]) + fix.b)
hypotheses = lambda c: c.put('I', 1).string('person').put('d', 0.9).put('7d', 1, 0, 0.5, 0, 0, 0, 1).put('36d', *[0] * 36)
d3 = Cdr().header(5, 'base_link').put('I', 1).header(5, '')
hypotheses(d3).put('7d', 2, 0, 0.9, 0, 0, 0, 1).put('3d', 0.5, 0.5, 1.8).string('17')
write('ingest', 'detections_3d.bin', bytes([12]) + d3.b)
d2 = Cdr().header(5, 'camera').put('I', 1).header(5, '')
hypotheses(d2).put('3d', 320, 240, 0).put('2d', 40, 80).string('')
write('ingest', 'detections_2d.bin', bytes([13]) + d2.b)
write('ingest', 'other.bin', bytes([14]) + Cdr().put('d', 1.5).b)
jpeg = Cdr().header(5, 'camera').string('jpeg').put('I', 6).raw(b'\xff\xd8\xff\xe0\x00\x10')
write('ingest', 'camera-image_raw-compressed.bin', bytes([6]) + jpeg.b)

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
