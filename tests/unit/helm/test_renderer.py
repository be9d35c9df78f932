#!/usr/bin/python3
"""helmrender against Helm 3's behaviour on a fixture chart (fixtures/semantics): numbers from
values files are float64 (1000000 prints as 1e+06), --set integers int64, toYaml through JSON
(sorted keys, unindented lists), null in a values file deletes a key, missing values print as
"", include/tpl/required, .Chart/.Release/.Files/.Capabilities/.Template, empty documents
dropped. semantics-expected.yaml is what `helm template rel fixtures/semantics -n ns
-f fixtures/semantics-override.yaml --set setInt=5 --api-versions monitoring.coreos.com/v1`
prints according to Helm 3's documented behaviour (Helm is not installable here: where it is,
regenerate the file with it and this test holds helmrender to it)."""
import os
import subprocess
import unittest

import helmtest

FIX = os.path.join(helmtest.HERE, "fixtures")


def run(*extra):
    return subprocess.run([helmtest.ARGS.renderer, "--chart", os.path.join(FIX, "semantics"),
                           "--name", "rel", "--namespace", "ns", *extra],
                          capture_output=True, text=True)


class Renderer(unittest.TestCase):
    def test_matches_helm_template(self):
        p = run("-f", os.path.join(FIX, "semantics-override.yaml"), "--set", "setInt=5",
                "--api-versions", "monitoring.coreos.com/v1")
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(os.path.join(FIX, "semantics-expected.yaml")) as f:
            self.assertEqual(p.stdout, f.read())

    def test_required_fails_with_its_message(self):
        p = run("--set", "mustFail=true")
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("mustFailValue is required", p.stderr)

    def test_invalid_yaml_is_an_error(self):
        p = run("--set", "badYaml=true", "--output", "json")
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("not valid YAML", p.stderr)


if __name__ == "__main__":
    helmtest.main()
