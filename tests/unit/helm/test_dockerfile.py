#!/usr/bin/python3
"""The Dockerfile (Docker cannot run here, so it is checked by construction): Debian bookworm,
multi-stage; the build stage installs tools/bootstrap's build and library packages; the runtime
stage installs the package of every shared library the built fetchcostd loads; paths and the
config location agree with the project layout and the chart."""
import os
import re
import shlex
import subprocess
import unittest

import helmtest

# In debian:bookworm-slim already (Essential or required by apt).
BASE = {"libc6", "libstdc++6", "libgcc-s1", "zlib1g", "libtinfo6", "liblzma5", "libzstd1"}


def read(*parts):
    with open(os.path.join(helmtest.ARGS.repo, *parts)) as f:
        return f.read()


def instructions(text):
    """Dockerfile instructions (continuations joined, comments dropped)."""
    out, cur = [], ""
    for line in text.splitlines():
        if not cur and (line.strip().startswith("#") or not line.strip()):
            continue
        if line.strip().startswith("#"):
            continue
        cur += line.rstrip("\\").rstrip() + " " if line.endswith("\\") else line
        if not line.endswith("\\"):
            out.append(cur.strip())
            cur = ""
    return out


def stages(text):
    args = {}
    result = []
    for ins in instructions(text):
        word, _, rest = ins.partition(" ")
        if word == "ARG" and not result:
            k, _, v = rest.partition("=")
            args[k] = v
        elif word == "FROM":
            image = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], rest.split()[0])
            result.append({"image": image, "instructions": []})
        elif result:
            result[-1]["instructions"].append(ins)
    return result


def apt_packages(stage):
    pkgs = set()
    for ins in stage["instructions"]:
        if ins.startswith("RUN") and "apt-get install" in ins:
            words = shlex.split(ins.split("apt-get install", 1)[1].split("&&")[0])
            pkgs |= {w for w in words if not w.startswith("-")}
    return pkgs


def bootstrap_packages(section_start, section_end):
    text = read("tools", "bootstrap")
    body = text.split(section_start, 1)[1].split(section_end, 1)[0]
    pkgs = set()
    for line in body.splitlines():
        line = line.split("#", 1)[0]
        pkgs |= set(line.split())
    return pkgs


class Dockerfile(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.text = read("Dockerfile")
        cls.stages = stages(cls.text)

    def test_two_bookworm_stages(self):
        self.assertEqual([s["image"] for s in self.stages], ["debian:bookworm", "debian:bookworm-slim"])
        self.assertIn("FROM ${DEBIAN_IMAGE} AS build", self.text)
        self.assertIn("COPY --from=build /out/ /", self.text)
        for s in self.stages:
            for ins in s["instructions"]:
                if "apt-get install" in ins:
                    self.assertIn("--no-install-recommends", ins)
                    self.assertIn("rm -rf /var/lib/apt/lists/*", ins)
                    self.assertIn("apt-get update", ins)

    def test_build_stage_has_bootstrap_packages(self):
        want = bootstrap_packages("# build\n", "# real components")
        self.assertIn("libbpf-dev", want)
        self.assertEqual(want - apt_packages(self.stages[0]), set())

    def test_build_paths_match_the_project(self):
        build = " ".join(self.stages[0]["instructions"])
        self.assertIn("--target fetchcostd fetchcost", build)
        self.assertIn("add_executable(fetchcostd", read("userspace", "daemon", "CMakeLists.txt"))
        self.assertIn("add_executable(fetchcost ", read("tools", "fetchcost", "CMakeLists.txt"))
        self.assertIn("/build/userspace/daemon/fetchcostd", build)
        self.assertIn("/build/tools/fetchcost/fetchcost", build)
        self.assertTrue(os.path.isdir(os.path.join(helmtest.ARGS.repo, "userspace", "cost", "presets")))

    def test_runtime_stage_has_every_shared_library(self):
        if not helmtest.ARGS.fetchcostd or not os.path.exists(helmtest.ARGS.fetchcostd):
            self.skipTest("fetchcostd not built")
        needed = re.findall(r"\(NEEDED\).*\[(.+?)\]",
                            subprocess.check_output(["readelf", "-d", helmtest.ARGS.fetchcostd], text=True))
        self.assertTrue(needed)
        runtime = apt_packages(self.stages[1])
        for so in needed:
            owners = subprocess.run(["dpkg", "-S", f"*/{so}"], capture_output=True, text=True).stdout
            pkgs = {line.split(":")[0] for line in owners.splitlines() if line}
            self.assertTrue(pkgs, f"no Debian package ships {so}")
            self.assertTrue(pkgs & (runtime | BASE), f"{so} ({pkgs}) is not installed in the runtime stage")
        self.assertIn('RUN ! ldd /usr/bin/fetchcostd /usr/bin/fetchcost | grep -F "not found"', self.text)

    def test_entrypoint_and_config_path(self):
        self.assertIn('ENTRYPOINT ["/usr/bin/fetchcostd"]', self.text)
        self.assertIn('CMD ["--config", "/etc/fetchcost/config.json"]', self.text)
        daemonset = read("helm", "fetchcost", "templates", "daemonset.yaml")
        self.assertIn("/etc/fetchcost/config.json", daemonset)
        self.assertIn("mountPath: /etc/fetchcost", daemonset)
        self.assertNotRegex(self.text, r"(?m)^USER ")  # root: BPF needs it (or the capabilities)
        self.assertNotIn(":latest", self.text)

    def test_dockerignore(self):
        ignored = read(".dockerignore").split()
        for pattern in (".git", "build", "build-*", "**/node_modules"):
            self.assertIn(pattern, ignored)


if __name__ == "__main__":
    helmtest.main()
