"""`sion export` read back by Foxglove's own schema packages: the public `mcap` reader and the
`foxglove-schemas-protobuf` message classes decode every channel of an export of the demo bag's
memory with one answer, and what they read is the memory: the robot's transforms and path, its
atoms as boxes, its camera frames, the answer's question, atoms and proof layers, and the verdict,
all on one timeline (the atoms' valid time).

    SION_BIN=target/debug/sion python3 -m unittest discover -s tests/viewers
"""

import json
import os
import subprocess
import tempfile
import unittest
from collections import Counter, defaultdict

from google.protobuf import descriptor_pb2
from mcap.reader import make_reader

import foxglove_schemas_protobuf.CameraCalibration_pb2 as camera_calibration_pb2
import foxglove_schemas_protobuf.CompressedImage_pb2 as compressed_image_pb2
import foxglove_schemas_protobuf.FrameTransform_pb2 as frame_transform_pb2
import foxglove_schemas_protobuf.Log_pb2 as log_pb2
import foxglove_schemas_protobuf.PosesInFrame_pb2 as poses_in_frame_pb2
import foxglove_schemas_protobuf.RawImage_pb2 as raw_image_pb2
import foxglove_schemas_protobuf.SceneUpdate_pb2 as scene_update_pb2

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SION = os.environ.get('SION_BIN', os.path.join(ROOT, 'target', 'debug', 'sion'))

CLASSES = {
    'foxglove.SceneUpdate': scene_update_pb2.SceneUpdate,
    'foxglove.FrameTransform': frame_transform_pb2.FrameTransform,
    'foxglove.PosesInFrame': poses_in_frame_pb2.PosesInFrame,
    'foxglove.RawImage': raw_image_pb2.RawImage,
    'foxglove.CompressedImage': compressed_image_pb2.CompressedImage,
    'foxglove.Log': log_pb2.Log,
    'foxglove.CameraCalibration': camera_calibration_pb2.CameraCalibration,
}

# The demo bag's run: 2026-01-01T00:00:00Z, 90 s.
START_NS = 1_767_225_600_000_000_000


def sion(*args):
    out = subprocess.run([SION, *args], capture_output=True, text=True)
    if out.returncode != 0:
        raise AssertionError(f'sion {" ".join(args)}: {out.stdout}{out.stderr}')
    return out.stdout


class FoxgloveExport(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.mkdtemp(prefix='sion-foxglove-test-')
        data = os.path.join(cls.work, 'memory')
        sion('replay', os.path.join(ROOT, 'bags', 'demo.mcap'), '--data', data)
        cls.proof = os.path.join(cls.work, 'answer.sionproof')
        sion('memory', 'recall', '--data', data, '--frame', 'map', '--box', '0m,0m,-1m,10m,8m,3m',
             '--from', '2026-01-01T00:00:00Z', '--to', '2026-01-01T00:00:30Z', '--out', cls.proof)
        cls.out = os.path.join(cls.work, 'export.mcap')
        cls.said = sion('export', '--data', data, '--out', cls.out, '--answer', cls.proof)
        cls.messages = defaultdict(list)
        cls.schemas = {}
        with open(cls.out, 'rb') as f:
            for schema, channel, message in make_reader(f).iter_messages():
                cls.schemas[channel.topic] = (schema.name, schema.encoding, channel.message_encoding, schema.data)
                if channel.message_encoding == 'protobuf':
                    decoded = CLASSES[schema.name].FromString(message.data)
                else:
                    decoded = json.loads(message.data)
                cls.messages[channel.topic].append((message.log_time, decoded))

    def test_every_foxglove_channel_is_a_well_known_schema_with_its_descriptor(self):
        protobuf = {t: s for t, s in self.schemas.items() if s[2] == 'protobuf'}
        self.assertTrue({'/tf', '/sion/scene/atoms', '/sion/scene/answers', '/sion/verdicts'} <= set(protobuf), protobuf)
        self.assertTrue(any(t.startswith('/sion/trajectory/') for t in protobuf), protobuf)
        self.assertTrue(any(t.startswith('/sion/camera/') for t in protobuf), protobuf)
        for topic, (name, encoding, _, data) in protobuf.items():
            self.assertEqual(encoding, 'protobuf', topic)
            # The schema is a FileDescriptorSet holding the message it names, as Foxglove reads it.
            files = descriptor_pb2.FileDescriptorSet.FromString(data)
            package, message = name.split('.')
            self.assertTrue(any(f.package == package and any(m.name == message for m in f.message_type)
                                for f in files.file), (topic, name))
        # The JSON channels stay beside them.
        for topic in ['/sion/atoms', '/sion/heads', '/sion/answers']:
            self.assertEqual(self.schemas[topic][1:3], ('jsonschema', 'json'), topic)

    def test_one_timeline_the_atoms_valid_time(self):
        times = [t for msgs in self.messages.values() for t, _ in msgs]
        # The demo run is 90 s of 2026-01-01: heads committed later by the wall clock are placed
        # at the valid time of the last atom they hold.
        self.assertGreaterEqual(min(times), START_NS)
        self.assertLessEqual(max(times), START_NS + 91 * 10**9)
        heads = self.messages['/sion/heads']
        self.assertTrue(heads)
        for t, head in heads:
            self.assertLessEqual(t, START_NS + 91 * 10**9)
            self.assertGreater(head['pulse_time_ns'], t)

    def test_transforms_trajectory_and_atoms_are_the_memory(self):
        atoms = [a for _, a in self.messages['/sion/atoms']]
        kinds = Counter(a['kind'] for a in atoms)
        tf = [m for _, m in self.messages['/tf']]
        self.assertEqual(len(tf), kinds['transform'])
        transforms = [a for a in atoms if a['kind'] == 'transform']
        self.assertEqual([(m.parent_frame_id, m.child_frame_id) for m in tf],
                         [(a['frame'], a['subject']) for a in transforms])
        self.assertAlmostEqual(tf[-1].translation.x, transforms[-1]['min'][0] / 1000, places=6)
        self.assertAlmostEqual(sum(q * q for q in [tf[-1].rotation.x, tf[-1].rotation.y, tf[-1].rotation.z,
                                                    tf[-1].rotation.w]), 1.0, places=6)
        # The robot's path in each frame it is posed in.
        posed = {(a['frame'], a['subject']) for a in atoms if a['kind'] == 'pose'}
        self.assertEqual({t for t in self.messages if t.startswith('/sion/trajectory/')},
                         {f'/sion/trajectory/{f}/{s}' for f, s in posed})
        last_pose = [a for a in atoms if a['kind'] == 'pose' and a['frame'] == 'map'][-1]
        _, path = self.messages['/sion/trajectory/map/robot'][-1]
        self.assertEqual(path.frame_id, 'map')
        self.assertTrue(0 < len(path.poses) <= 601)
        self.assertAlmostEqual(path.poses[-1].position.y, last_pose['min'][1] / 1000, delta=0.2)
        boxes = [e for _, m in self.messages['/sion/scene/atoms'] for e in m.entities]
        self.assertEqual(len(boxes), len(atoms) - kinds['transform'] - kinds['pose'])
        for e in boxes:
            self.assertEqual(len(e.lines), 1)
            self.assertEqual(len(e.lines[0].points), 24)
        images = [(t, m) for t, msgs in self.messages.items()
                  if t.startswith('/sion/camera/') and not t.endswith('/calibration') for _, m in msgs]
        self.assertTrue(images)
        self.assertTrue(all(m.frame_id and len(m.data) > 0 for _, m in images))
        # Each image beside its camera's calibration, as the memory remembered it (the demo's
        # camera: 160 x 120).
        calibrations = [m for t, _ in {t: 0 for t, _ in images}.items() for _, m in self.messages[f'{t}/calibration']]
        self.assertEqual(len(calibrations), len(images))
        self.assertTrue(all(c.width == 160 and c.height == 120 and c.K[0] > 0 and c.frame_id == images[0][1].frame_id
                            for c in calibrations))

    def test_the_answer_is_drawn_with_its_proof_in_layers_and_its_verdict_logged(self):
        (_, answer), = self.messages['/sion/answers']
        self.assertTrue(answer['valid'], answer)
        (_, update), = self.messages['/sion/scene/answers']
        entities = {e.id.split('/', 2)[2]: e for e in update.entities}
        self.assertIn('question', entities)
        self.assertTrue({'proof/opened', 'proof/passed_over', 'proof/not_answering'} <= set(entities), set(entities))
        question = entities['question']
        self.assertEqual(question.frame_id, 'map')
        xs = [p.x for p in question.lines[0].points]
        self.assertEqual((min(xs), max(xs)), (0.0, 10.0))
        self.assertIn(f'✓ proof verifies: {len(answer["positions"])} atoms', question.texts[0].text)
        drawn = sum(len(e.lines[0].points) // 24 for k, e in entities.items() if k.startswith('answer/'))
        self.assertEqual(drawn, len(answer['positions']))
        (_, verdict), = self.messages['/sion/verdicts']
        self.assertEqual(verdict.level, log_pb2.Log.Level.INFO)
        self.assertIn('verified', verdict.message)
        self.assertIn('foxglove', self.said.lower())
