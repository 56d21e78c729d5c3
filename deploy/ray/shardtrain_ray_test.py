"""Tests of the KubeRay driver's command construction (no Ray needed; run by ctest)."""

import contextlib
import io
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shardtrain_ray  # noqa: E402


def parse(words):
    return shardtrain_ray.parse_args(words)


class LaunchCommandTest(unittest.TestCase):
    def test_node_commands_share_node_zero_as_the_store_endpoint(self):
        args = parse(["--nodes", "2", "--gpus-per-node", "8", "--run-id", "llama-ft",
                      "--max-restarts", "2", "--stop-grace", "60", "--",
                      "train", "--config", "/etc/job.toml"])
        self.assertEqual(
            shardtrain_ray.launch_command(args, 1, "10.1.2.3"),
            ["shardtrain", "launch", "--nnodes", "2", "--node-rank", "1",
             "--nproc-per-node", "8", "--rdzv-backend", "static",
             "--rdzv-endpoint", "10.1.2.3:29500", "--rdzv-id", "llama-ft",
             "--max-restarts", "2", "--stop-grace", "60", "--",
             "train", "--config", "/etc/job.toml"])

    def test_ipv6_address_is_bracketed(self):
        args = parse(["--nodes", "1", "--gpus-per-node", "0", "--run-id", "x", "--", "train"])
        command = shardtrain_ray.launch_command(args, 0, "fd00::5")
        self.assertEqual(command[command.index("--rdzv-endpoint") + 1], "[fd00::5]:29500")

    def test_metrics_port_goes_to_every_nodes_launcher(self):
        args = parse(["--nodes", "2", "--gpus-per-node", "8", "--run-id", "x",
                      "--metrics-port", "9400", "--", "train"])
        command = shardtrain_ray.launch_command(args, 1, "10.1.2.3")
        self.assertEqual(command[command.index("--metrics-port") + 1], "9400")
        self.assertLess(command.index("--metrics-port"), command.index("--"))
        plain = shardtrain_ray.launch_command(
            parse(["--nodes", "1", "--gpus-per-node", "0", "--run-id", "x", "--", "train"]), 0,
            "h")
        self.assertNotIn("--metrics-port", plain)

    def test_cpu_job_runs_one_worker_per_node(self):
        args = parse(["--nodes", "3", "--gpus-per-node", "0", "--run-id", "x", "--", "train"])
        self.assertEqual(args.nproc_per_node, 1)
        self.assertEqual(shardtrain_ray.bundles(3, 0), [{"CPU": 1}] * 3)

    def test_one_bundle_per_node_holds_all_its_gpus(self):
        self.assertEqual(shardtrain_ray.bundles(2, 8), [{"CPU": 1, "GPU": 8}] * 2)

    def test_exit_code_is_the_first_failure(self):
        self.assertEqual(shardtrain_ray.combined_exit_code([0, 0]), 0)
        self.assertEqual(shardtrain_ray.combined_exit_code([0, 3, 1]), 3)

    def test_bad_input_exits_2(self):
        for words in (["--nodes", "0", "--gpus-per-node", "1", "--run-id", "x", "--", "train"],
                      ["--nodes", "2", "--run-id", "x", "--", "train"],
                      ["--nodes", "2", "--gpus-per-node", "1", "--run-id", "x", "--"]):
            with self.subTest(words=words), contextlib.redirect_stderr(io.StringIO()):
                with self.assertRaises(SystemExit) as raised:
                    parse(words)
                self.assertEqual(raised.exception.code, 2)

    def test_missing_separator_is_an_error(self):
        err = io.StringIO()
        with self.assertRaises(SystemExit) as raised, contextlib.redirect_stderr(err):
            parse(["--nodes", "2", "--gpus-per-node", "1", "--run-id", "x", "train"])
        self.assertEqual(raised.exception.code, 2)
        self.assertIn("after --", err.getvalue())

    def test_streaming_prefixes_lines_and_returns_the_exit_code(self):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = shardtrain_ray.run_streaming(
                ["/bin/sh", "-c", "echo one; echo two >&2; exit 3"], 1)
        self.assertEqual(code, 3)
        self.assertEqual(sorted(out.getvalue().splitlines()), ["[node 1] one", "[node 1] two"])


if __name__ == "__main__":
    unittest.main()


class NextRoundTest(unittest.TestCase):
    def test_success_config_error_and_lost_nodes(self):
        lost = shardtrain_ray.LOST
        next_round = shardtrain_ray.next_round
        self.assertEqual(next_round([0, 0], 0, 3), ("exit", 0))
        self.assertEqual(next_round([0, 2], 0, 3), ("exit", 2))  # config error: never again
        self.assertEqual(next_round([lost, 2], 0, 3), ("exit", 2))
        self.assertEqual(next_round([lost, 1], 0, 3), ("again", None))
        self.assertEqual(next_round([lost, 1], 3, 3), ("exit", 1))
        self.assertEqual(next_round([lost, 0], 3, 3), ("exit", 1))
        self.assertEqual(next_round([0, 137], 0, 3), ("exit", 137))  # launcher spent its restarts

    def test_master_address_is_read_from_the_group_each_time(self):
        table = {"bundles_to_node_id": {0: "n2", 1: "n1"}}
        nodes = [{"NodeID": "n1", "NodeManagerAddress": "10.0.0.1"},
                 {"NodeID": "n2", "NodeManagerAddress": "10.0.0.9"}]
        self.assertEqual(
            shardtrain_ray.master_address_of("g", lambda group: table, lambda: nodes),
            "10.0.0.9")
        table["bundles_to_node_id"][0] = "n1"  # node 0's bundle moved to a replacement node
        self.assertEqual(
            shardtrain_ray.master_address_of("g", lambda group: table, lambda: nodes),
            "10.0.0.1")
