"""bench/benchlib.py without a GPU: the FLOPs formula of every MFU figure, the scaling table's
two PyTorch baselines (compiled, the one that counts, and eager) and its ratios, a run without
a result, loss-diff and host-wait. Run: python3 -m unittest discover -s tests/bench -p '*_test.py'."""
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
import benchlib  # noqa: E402

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


class FlopsTest(unittest.TestCase):
    def test_qwen_shape_by_hand(self):
        # Qwen2.5-1.5B: per layer q 1536x1536 (+bias not counted), k, v 1536x256, o 1536x1536,
        # gate, up, down 1536x8960; lm head tied 1536x151936; attention 6 * 28 * 4096 * 12 * 128.
        h, kv, f, layers, vocab, seq, heads, dim = 1536, 256, 8960, 28, 151936, 4096, 12, 128
        matmul = layers * (2 * h * h + 2 * h * kv + 3 * h * f) + h * vocab
        expected = 6 * matmul + 6 * layers * seq * heads * dim
        config = os.path.join(ROOT, "bench", "shapes", "qwen2.5-1.5b", "config.json")
        self.assertEqual(int(benchlib.flops_per_token(config, seq)), expected)

    def test_lora_counts_the_work_done(self):
        # LoRA r 16 on all seven projections: the frozen base runs forward and dgrad only
        # (4 x its matmuls), each adapter all three GEMMs on r x (in + out) weights.
        h, kv, f, layers, vocab, seq, heads, dim, r = 1536, 256, 8960, 28, 151936, 4096, 12, 128, 16
        matmul = layers * (2 * h * h + 2 * h * kv + 3 * h * f) + h * vocab
        adapters = layers * r * (2 * (h + h) + 2 * (h + kv) + 3 * (h + f))
        expected = 4 * matmul + 6 * adapters + 6 * layers * seq * heads * dim
        config = os.path.join(ROOT, "bench", "shapes", "qwen2.5-1.5b", "config.json")
        self.assertEqual(int(benchlib.flops_per_token(config, seq, r)), expected)
        self.assertEqual(benchlib.flops_per_token(config, seq, 0),
                         benchlib.flops_per_token(config, seq))


class ScalingTableTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.runs = os.path.join(self.dir.name, "runs.jsonl")

    def tearDown(self):
        self.dir.cleanup()

    def write(self, name, text):
        path = os.path.join(self.dir.name, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def ours(self, gpus, tokens_per_s, status="ok"):
        # rank 0's --metrics: tokens summed over ranks; steps 1-2 untimed.
        lines = [{"step": s, "tokens": s * 1000 * gpus, "elapsed_s": s * 1000 / tokens_per_s,
                  "loss": 2.0} for s in range(1, 6)]
        metrics = self.write(f"ours{gpus}.jsonl", "".join(json.dumps(l) + "\n" for l in lines))
        mem = self.write(f"ours{gpus}.csv", "".join(f"{i}, 30000\n" for i in range(gpus)))
        benchlib.record(self.runs, ["run=qwen", "engine=shardtrain", "strategy=full_shard",
                                    f"gpus={gpus}", f"status={status}", "flops=1e10",
                                    f"metrics={metrics}", f"mem={mem}"])

    def torch(self, engine, gpus, tokens_per_s):
        log = self.write(f"{engine}{gpus}.log",
                         f'[rank0]: {{"tokens_per_s": {tokens_per_s}, "peak_mib": 1}}\n')
        mem = self.write(f"{engine}{gpus}.csv", "0, 40000\n")
        benchlib.record(self.runs, ["run=qwen", f"engine={engine}", "strategy=full_shard",
                                    f"gpus={gpus}", "status=ok", "flops=1e10", f"log={log}",
                                    f"mem={mem}"])

    def test_ratios_against_compiled_and_eager(self):
        self.ours(1, 48000)
        self.torch("pytorch-compiled", 1, 40000)
        self.torch("pytorch", 1, 30000)
        self.ours(2, 45600)
        self.torch("pytorch-compiled", 2, 38000)
        table = benchlib.scaling_table(self.runs).splitlines()
        rows = [l.split() for l in table if l.startswith("qwen")]
        self.assertEqual([r[1] for r in rows],
                         ["shardtrain", "pytorch-compiled", "pytorch", "shardtrain",
                          "pytorch-compiled"])
        header = next(l for l in table if l.startswith("shape"))
        self.assertIn("vs comp vs eager", header)
        ours1, ours2 = rows[0], rows[3]
        # ... tok/s/gpu MFU peakGiB planGiB meas/plan eff vs-comp vs-eager wait status
        self.assertEqual(ours1[4], "48000")
        self.assertEqual(ours1[-4], "1.200")  # vs compiled
        self.assertEqual(ours1[-3], "1.600")  # vs eager
        self.assertEqual(ours2[-4], "1.200")
        self.assertEqual(ours2[-3], "-")  # no eager run at 2 GPUs
        self.assertEqual(ours2[-5], "0.950")  # scaling efficiency
        for torch_row in (rows[1], rows[2], rows[4]):
            self.assertEqual(torch_row[-4:-2], ["-", "-"])  # ratios are ours' only

    def test_a_run_without_a_result_keeps_its_reason(self):
        self.ours(1, 48000, status="timeout (300 s)")
        row = next(l for l in benchlib.scaling_table(self.runs).splitlines()
                   if l.startswith("qwen"))
        self.assertIn("timeout (300 s)", row)


class LossDifferenceTest(unittest.TestCase):
    def test_largest_relative_difference(self):
        with tempfile.TemporaryDirectory() as d:
            a, b = os.path.join(d, "a"), os.path.join(d, "b")
            with open(a, "w") as f:
                f.write('{"loss": 2.0}\n{"loss": 1.0}\n')
            with open(b, "w") as f:
                f.write('{"loss": 2.0}\n{"loss": 1.01}\n')
            self.assertAlmostEqual(benchlib.loss_difference(a, b), 0.01)


class HostWaitTest(unittest.TestCase):
    def test_share_of_the_timed_steps(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "m.jsonl")
            with open(path, "w") as f:  # steps 1 and 2 are warm-up, not counted
                for wait, step in [(0.5, 1.0), (0.5, 1.0), (0.02, 0.06), (0.01, 0.06)]:
                    f.write(json.dumps({"host_wait_s": wait, "step_time_s": step}) + "\n")
            self.assertEqual(benchlib.ours_host_wait(path),
                             "host waited for the GPU 15.0 of 60.0 ms a step (25%)")

    def test_not_recorded_on_cpu(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "m.jsonl")
            with open(path, "w") as f:
                f.write('{"step_time_s": 1.0}\n' * 4)
            self.assertIsNone(benchlib.ours_host_wait(path))


if __name__ == "__main__":
    unittest.main()
