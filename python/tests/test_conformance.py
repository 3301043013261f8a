"""The conformance suite (tests/conformance/manifest.json) through the Python package: every
proof file gets the verdict the manifest states."""

import datetime
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


class FleetConformance(unittest.TestCase):
    """tests/conformance/fleet: a fleet recall bundle of 8 robots, complete, and with a robot
    left out, one stale and one lying, each refused with its code."""

    FLEET = SUITE / "fleet"

    def question(self):
        q = json.loads((self.FLEET / "question.json").read_text())
        return q, {"frame": q["frame"], "box": tuple(q["box"]), "from_ns": q["from_ns"], "to_ns": q["to_ns"]}

    def test_the_whole_fleet_answers(self):
        q, question = self.question()
        answer = sion_verify.check_fleet((self.FLEET / "valid.sionfleet").read_bytes(), q["ledger_key"], **question)
        self.assertEqual(len(answer["atoms"]), q["valid"]["atoms"])
        self.assertEqual(answer["in_scope"], q["valid"]["in_scope"])
        self.assertTrue(all(a["log"] == entry["log"] for entry in answer["logs"] for a in entry["atoms"]
                            if a in answer["atoms"]))

    def test_left_out_stale_and_lying_are_refused(self):
        q, question = self.question()
        for name, code in q["refused"].items():
            with self.subTest(case=name):
                with self.assertRaises(sion_verify.ProofError) as refused:
                    sion_verify.check_fleet((self.FLEET / f"{name}.sionfleet").read_bytes(), q["ledger_key"],
                                            **question)
                self.assertEqual(refused.exception.code, code, str(refused.exception))

    def test_another_question_or_group_is_refused(self):
        q, question = self.question()
        bundle = (self.FLEET / "valid.sionfleet").read_bytes()
        with self.assertRaises(sion_verify.ProofError):
            sion_verify.check_fleet(bundle, q["ledger_key"], **dict(question, to_ns=question["to_ns"] + 1))
        with self.assertRaises(sion_verify.ProofError) as refused:
            sion_verify.check_fleet(bundle, q["ledger_key"], group="Not A Name", **question)
        self.assertEqual(refused.exception.code, "group")


class FleetCellsConformance(FleetConformance):
    """tests/conformance/fleet-cells: a recall answered by the ledger's cells (SIONFLT2): only
    the logs the question's cells list are stated and answer; a stated log dropped, a cell's
    logs edited and a lying answer are refused with their codes."""

    FLEET = SUITE / "fleet-cells"

    def test_as_of_an_earlier_pulse_by_later_cells(self):
        q, question = self.question()
        for name in q["also_valid"]:
            answer = sion_verify.check_fleet((self.FLEET / f"{name}.sionfleet").read_bytes(), q["ledger_key"],
                                             **question)
            self.assertEqual(len(answer["atoms"]), q["valid"]["atoms"])


class Vocabulary(unittest.TestCase):
    """docs/UNITS.md through Python: the same parser as Rust (tests/conformance/units.json), and
    a range question asked in metres, ROS Time or RFC 3339 checks the same proof."""

    def test_every_unit_vector_reads_as_the_file_says(self):
        suite = json.loads((SUITE / "units.json").read_text())
        for case in suite["cases"]:
            with self.subTest(case=case):
                end = case.get("edge") == "high"
                read = {
                    "length": lambda t: sion_verify.parse_box(f"{t},0,0,{t},0,0")[3 if end else 0],
                    "box": lambda t: list(sion_verify.parse_box(t)),
                    "time": lambda t: sion_verify.parse_time(t, end),
                    "duration": sion_verify.parse_duration,
                    "frame": sion_verify.frame_name,
                }[case["value"]]
                if "error" in case:
                    with self.assertRaises(ValueError):
                        read(case["text"])
                else:
                    want = case.get("mm", case.get("ns", case.get("frame")))
                    self.assertEqual(read(case["text"]), want)

    def test_a_question_in_any_unit_checks_the_same_proof(self):
        manifest = json.loads((SUITE / "manifest.json").read_text())
        case = next(c for c in manifest["cases"] if c["file"] == "range.sionproof")
        proof = (SUITE / "range.sionproof").read_bytes()
        e = case["expect"]
        box_m = [v / 1000 for v in e["box"]]

        class RosTime:  # builtin_interfaces.msg.Time's shape
            def __init__(self, ns):
                self.sec, self.nanosec = divmod(ns, 1_000_000_000)

        as_asked = sion_verify.verify(proof, case["ledger_key"], **expectation(e))
        for kwargs in (
            {"frame": "/" + e["frame"], "box_m": box_m, "from_time": RosTime(e["from_ns"]), "to_time": RosTime(e["to_ns"])},
            {"frame": e["frame"], "box": ",".join(f"{v}mm" for v in e["box"]),
             "from_time": f"{e['from_ns']}ns", "to_time": f"{e['to_ns']}ns"},
        ):
            with self.subTest(kwargs=kwargs):
                answer = sion_verify.verify(proof, case["ledger_key"], **kwargs)
                self.assertEqual(answer["statement"], as_asked["statement"])
        with self.assertRaisesRegex(ValueError, "seconds or nanoseconds"):
            sion_verify.verify(proof, case["ledger_key"], frame="map", box=e["box"], from_time=1.5, to_ns=e["to_ns"])
        with self.assertRaisesRegex(ValueError, "1767225600.5s"):
            sion_verify.parse_time("1767225600.5")
        self.assertEqual(sion_verify.time_ns(datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)),
                         1_767_225_600_000_000_000)
