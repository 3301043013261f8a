"""The conformance suite (tests/conformance/manifest.json) through the Python package: every
proof file gets the verdict the manifest states."""

import json
import pathlib
import unittest

import sion_verify

SUITE = pathlib.Path(__file__).resolve().parents[2] / "tests" / "conformance"


def expectation(expect):
    kwargs = dict(expect)
    if "box" in kwargs:
        kwargs["box"] = tuple(kwargs["box"])
    for name in ("extends", "head"):
        if name in kwargs:
            kwargs[name] = (kwargs[name]["size"], kwargs[name]["root"])
    return kwargs


class Conformance(unittest.TestCase):
    def test_every_case_gets_its_verdict(self):
        manifest = json.loads((SUITE / "manifest.json").read_text())
        cases = manifest["cases"]
        self.assertGreaterEqual(len(cases), 30)
        for case in cases:
            with self.subTest(case=case["file"]):
                proof = (SUITE / case["file"]).read_bytes()
                kwargs = expectation(case["expect"])
                if case["verdict"] == "valid":
                    answer = sion_verify.verify(proof, case["ledger_key"], **kwargs)
                    self.assertEqual(answer["statement"], case["statement"])
                    self.assertEqual(answer["head"]["size"], case["head_size"])
                    self.assertEqual([a["position"] for a in answer["atoms"]], case["atoms"])
                else:
                    with self.assertRaises(sion_verify.ProofError) as refused:
                        sion_verify.verify(proof, case["ledger_key"], **kwargs)
                    self.assertEqual(refused.exception.code, case["error"], str(refused.exception))


class Api(unittest.TestCase):
    def setUp(self):
        self.manifest = json.loads((SUITE / "manifest.json").read_text())
        self.range = next(c for c in self.manifest["cases"] if c["file"] == "range.sionproof")
        self.proof = (SUITE / "range.sionproof").read_bytes()

    def test_answer_atoms_are_decoded(self):
        answer = sion_verify.verify(self.proof, self.range["ledger_key"], **expectation(self.range["expect"]))
        self.assertEqual(answer["kind"], "range")
        self.assertTrue(answer["atoms"])
        for atom in answer["atoms"]:
            self.assertEqual(atom["frame"], "map")
            self.assertEqual(len(atom["id"]), 64)
        self.assertEqual(answer["pulse"]["ledger_key"], self.range["ledger_key"])

    def test_the_key_is_the_readers_not_the_proofs(self):
        other = "11" * 32
        with self.assertRaises((sion_verify.ProofError, ValueError)):
            sion_verify.verify(self.proof, other, **expectation(self.range["expect"]))

    def test_bad_arguments_say_which(self):
        with self.assertRaisesRegex(ValueError, "ledger_key"):
            sion_verify.verify(self.proof, "abc")
        with self.assertRaisesRegex(ValueError, "frame"):
            sion_verify.verify(self.proof, self.range["ledger_key"], box=(0, 0, 0, 1, 1, 1))
        with self.assertRaisesRegex(ValueError, "box"):
            sion_verify.verify(self.proof, self.range["ledger_key"], frame="map", box=(0, 0, 0), from_ns=0, to_ns=1)

    def test_garbage_is_refused_not_crashed(self):
        for garbage in (b"", b"SIONPRF2", bytes(range(256)) * 4):
            with self.assertRaises(sion_verify.ProofError) as refused:
                sion_verify.verify(garbage, self.range["ledger_key"])
            self.assertEqual(refused.exception.code, "format")


if __name__ == "__main__":
    unittest.main()


BELIEF = SUITE / "belief"


class BeliefConformance(unittest.TestCase):
    """tests/conformance/belief: each bundle believed under its case's policy, or refused."""

    def test_every_bundle_case_gets_its_verdict(self):
        cases = json.loads((BELIEF / "manifest.json").read_text())["cases"]
        self.assertGreaterEqual(len(cases), 12)
        for i, case in enumerate(cases):
            with self.subTest(case=i, file=case["file"]):
                bundle = (BELIEF / case["file"]).read_bytes()
                args = (bundle, case["ledger_key"], case["targets"], case["policy"])
                ask = {"as_of": case["as_of"], "trust_log_set": case.get("trust_log_set", False)}
                if "states" in case["verdict"]:
                    out = sion_verify.believe(*args, **ask)
                    self.assertEqual([b["state"] for b in out["beliefs"]], case["verdict"]["states"])
                    self.assertEqual([b["target"] for b in out["beliefs"]], case["targets"])
                    # Staleness is checked only when a Pulse is asked for, and the answer says so.
                    self.assertEqual(out["staleness"], case["as_of"])
                    self.assertEqual(all(s["proved"] for s in out["logs"]), not ask["trust_log_set"])
                else:
                    with self.assertRaises(sion_verify.BundleError) as refused:
                        sion_verify.believe(*args, **ask)
                    self.assertEqual(refused.exception.code, case["verdict"]["refused"],
                                     str(refused.exception))

    def test_a_bad_argument_names_itself(self):
        key = json.loads((BELIEF / "manifest.json").read_text())["cases"][0]["ledger_key"]
        with self.assertRaisesRegex(ValueError, "targets\\[0\\]"):
            sion_verify.believe(b"", key, ["nope"], {"revisers": [], "prefer": "latest"})
        with self.assertRaisesRegex(ValueError, "policy"):
            sion_verify.believe(b"", key, [], {"prefer": "latest"})
        with self.assertRaisesRegex(ValueError, "ledger_key"):
            sion_verify.believe(b"", "00" * 31, [], {"revisers": [], "prefer": "latest"})
