"""deploy/Dockerfile passes dockerfile_lint.py, and each pitfall the lint knows is caught when
put back into it (run by ctest: k8s_dockerfile_lint_test)."""

import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import dockerfile_lint  # noqa: E402


def read(path):
    with open(os.path.join(ROOT, path)) as file:
        return file.read()


class DockerfileLintTest(unittest.TestCase):
    def setUp(self):
        self.dockerfile = read("deploy/Dockerfile")
        self.setup = read("scripts/setup.sh")

    def problems_with(self, old, new):
        self.assertIn(old, self.dockerfile)
        return dockerfile_lint.lint(self.dockerfile.replace(old, new, 1), self.setup)

    def test_the_dockerfile_has_no_known_pitfall(self):
        self.assertEqual(dockerfile_lint.lint(self.dockerfile, self.setup), [])

    def test_each_pitfall_is_caught(self):
        cases = [
            ("--allow-change-held-packages \\\n", "", "NCCL pinned without"),
            ("python3-pip wget", "python3-pip", "wget is missing"),
            (" libyaml-cpp-dev", "", "libyaml-cpp-dev is missing"),
            ("curl -fsSL", "curl -sSL", "curl without -f"),
            ("--no-cache-dir ", "", "pip install without --no-cache-dir"),
            ("ARG NCCL_VERSION=2.26.5-1+cuda12.8\nARG EFA", "ARG EFA", "${NCCL_VERSION} is an ARG"),
            ("COPY --from=build /opt", "COPY --from=builder /opt", "no such stage"),
        ]
        for old, new, expected in cases:
            problems = self.problems_with(old, new)
            self.assertTrue(any(expected in p for p in problems), (old, problems))

    def test_apt_steps_name_each_stage(self):
        steps = dockerfile_lint.apt_steps(self.dockerfile)
        self.assertEqual(sorted(steps), ["build", "ray", "runtime"])
        self.assertIn("libyaml-cpp-dev", steps["build"][0])
        self.assertIn("wget", steps["ray"][0])


if __name__ == "__main__":
    unittest.main()
