#!/usr/bin/env python3
"""Runs the workspace's test binaries side by side, as `cargo test` would
one after another.

Most of Waft's integration tests wait: for a heartbeat to lapse, a lease to
expire, a cluster to start. `cargo test` runs one binary at a time, so the
machine idles through those waits; this runs WAFT_TEST_JOBS binaries at
once (two by default; one heavy one at most, see HEAVY), the longest known
first, with the environment and working directory cargo gives each, and
the doc tests beside them.

    run_tests.py [CARGO ARGS] [-- TEST ARGS]

Each binary's output is kept and printed whole when it ends, never
interleaved; a summary of every binary's wall and CPU time ends the run, and the
exit status is non-zero when any binary failed.

WAFT_TEST_BESIDE, a shell command, runs beside the tests at the lowest
priority (`nice -n 19`): CI builds the fuzz targets there, in the CPU time
the waiting tests leave. It fails the run when it fails. It starts once the
doc tests, first in the list, are done: a cargo command holds the lock on
`target/` that they need to compile.
"""

import json
import os
import subprocess
import sys
import tempfile
import threading
import time

# The binaries that take longest and load the machine most (clusters of
# processes, compilers of large components, hostile lambdas): one of them
# runs at a time, the longest first, each beside the light ones — two heavy
# ones at once would starve each other's heartbeats on a small machine.
HEAVY = [
    "waft-cli/pipeline",
    "waft-runtime/runtime",
    "waft-cli/hostile",
    "waft-cli/chaos",
]

print_lock = threading.Lock()


def say(text):
    with print_lock:
        sys.stdout.write(text)
        sys.stdout.flush()


def split_args(argv):
    if "--" in argv:
        at = argv.index("--")
        return argv[:at], argv[at + 1 :]
    return argv, []


def build(cargo_args):
    """Builds every test binary; returns them as (name, path, package dir,
    package name, version)."""
    command = ["cargo", "test", "--no-run", "--message-format=json-render-diagnostics"]
    process = subprocess.run(command + cargo_args, stdout=subprocess.PIPE, text=True)
    if process.returncode != 0:
        sys.exit(process.returncode)
    binaries = []
    for line in process.stdout.splitlines():
        message = json.loads(line)
        if message.get("reason") != "compiler-artifact":
            continue
        if not message["profile"]["test"] or not message.get("executable"):
            continue
        package_id = message["package_id"]
        manifest = message["manifest_path"]
        package = package_name(package_id, manifest)
        kind = message["target"]["kind"][0]
        target = message["target"]["name"]
        name = f"{package}/{target}" if kind != "lib" else f"{package} (unit)"
        binaries.append((name, message["executable"], os.path.dirname(manifest), package))
    return binaries


def package_name(package_id, manifest):
    # "path+file:///…/host/cli#waft-cli@0.1.0", or an older "name 0.1.0 (…)".
    if "#" in package_id:
        tail = package_id.rsplit("#", 1)[1]
        return tail.split("@", 1)[0] if "@" in tail else os.path.basename(os.path.dirname(manifest))
    return package_id.split(" ", 1)[0]


def order(binaries):
    """The heavy binaries in their order, then the rest by name."""
    rank = {name: i for i, name in enumerate(HEAVY)}
    return sorted(binaries, key=lambda b: (rank.get(b[0], len(HEAVY)), b[0]))


class Schedule:
    """Hands out the jobs in order to `jobs` workers, never two heavy ones
    at once: a worker skips ahead to a light job while a heavy one runs."""

    def __init__(self, jobs):
        self.pending = list(jobs)
        self.heavy_running = False
        self.ready = threading.Condition()

    def take(self):
        with self.ready:
            while True:
                if not self.pending:
                    return None
                for i, job in enumerate(self.pending):
                    heavy = job[1][0] in HEAVY
                    if not (heavy and self.heavy_running):
                        del self.pending[i]
                        self.heavy_running |= heavy
                        return job
                self.ready.wait()

    def done(self, job):
        with self.ready:
            if job[1][0] in HEAVY:
                self.heavy_running = False
            self.ready.notify_all()


def toolchain_libdir():
    """The toolchain's libraries: a proc-macro crate's tests link its
    `libstd` dynamically, and cargo points the loader at them."""
    return subprocess.run(
        ["rustc", "--print", "target-libdir"], stdout=subprocess.PIPE, text=True, check=True
    ).stdout.strip()


# What CI's build sets for clippy (.ci/run) is the build's: a test that
# runs cargo itself (the SDK's compile-fail tests) must build as a user would.
BUILD_ONLY = ["RUSTC_WORKSPACE_WRAPPER", "CLIPPY_ARGS", "WAFT_CLIPPY_SAMPLES"]


def timed(command, **options):
    """Runs `command` with its output in a file; its exit code, output, wall
    time and CPU time. The CPU time (wait4's) counts the processes it waited
    for too: a test's `waft` processes, not a daemon such as Postgres."""
    with tempfile.TemporaryFile(mode="w+") as log:
        started = time.monotonic()
        child = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, **options)
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        took = time.monotonic() - started
        log.seek(0)
        return child.returncode, log.read(), took, usage.ru_utime + usage.ru_stime


def run(job, test_args, libraries):
    name, executable, directory, package = job
    env = {k: v for k, v in os.environ.items() if k not in BUILD_ONLY}
    env["CARGO_MANIFEST_DIR"] = directory
    env["CARGO_PKG_NAME"] = package
    paths = [os.path.dirname(executable), libraries, env.get("LD_LIBRARY_PATH", "")]
    env["LD_LIBRARY_PATH"] = ":".join(p for p in paths if p)
    code, output, took, cpu = timed([executable] + test_args, cwd=directory, env=env)
    status = "ok" if code == 0 else f"FAILED ({code})"
    say(f"\n==== {name}: {status} in {took:.0f} s, {cpu:.0f} s of CPU ({executable})\n{output}")
    return name, code, took, cpu


def doc_tests(cargo_args, test_args):
    command = ["cargo", "test", "--doc"] + cargo_args + ["--"] + test_args
    code, output, took, cpu = timed(command)
    status = "ok" if code == 0 else f"FAILED ({code})"
    say(f"\n==== doc tests: {status} in {took:.0f} s, {cpu:.0f} s of CPU\n{output}")
    return "doc tests", code, took, cpu


class Beside:
    """WAFT_TEST_BESIDE's command, started at the lowest priority."""

    def __init__(self, command):
        self.command = command
        self.log = tempfile.TemporaryFile(mode="w+")
        self.started = time.monotonic()
        self.process = subprocess.Popen(
            ["nice", "-n", "19", "bash", "-c", command], stdout=self.log, stderr=subprocess.STDOUT
        )

    def wait(self):
        """Its exit code, once it has ended; prints its output."""
        _, status, usage = os.wait4(self.process.pid, 0)
        code = os.waitstatus_to_exitcode(status)
        took = time.monotonic() - self.started
        cpu = usage.ru_utime + usage.ru_stime
        self.log.seek(0)
        state = "ok" if code == 0 else f"FAILED ({code})"
        say(f"\n==== beside the tests, {self.command}: {state} in {took:.0f} s, {cpu:.0f} s of CPU\n")
        say(self.log.read())
        return code


def main():
    cargo_args, test_args = split_args(sys.argv[1:])
    binaries = order(build(cargo_args))
    beside_command = os.environ.get("WAFT_TEST_BESIDE")
    beside = []
    jobs = int(os.environ.get("WAFT_TEST_JOBS", "2"))
    started = time.monotonic()
    # Doc tests too, unless the arguments chose some targets alone: first,
    # and the command beside the tests once they are done.
    chosen = {"--lib", "--bin", "--bins", "--test", "--tests", "--example", "--examples", "--bench"}
    jobs_list = [("run", job) for job in binaries]
    if not any(arg.split("=")[0] in chosen for arg in cargo_args):
        jobs_list.insert(0, ("doc", ("doc tests",)))
    elif beside_command:
        beside.append(Beside(beside_command))
    schedule = Schedule(jobs_list)
    libraries = toolchain_libdir()
    results = []

    def worker():
        while (job := schedule.take()) is not None:
            kind, what = job
            if kind == "run":
                results.append(run(what, test_args, libraries))
            else:
                results.append(doc_tests(cargo_args, test_args))
                if beside_command:
                    beside.append(Beside(beside_command))
            schedule.done(job)

    workers = [threading.Thread(target=worker) for _ in range(max(jobs, 1))]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    wall = time.monotonic() - started
    failed = [name for name, code, _, _ in results if code != 0]
    for command in beside:
        if command.wait() != 0:
            failed.append(command.command)
    cpu = sum(r[3] for r in results)
    say(f"\n==== {len(results)} test binaries, {jobs} at a time, in {wall:.0f} s, {cpu:.0f} s of CPU\n")
    say("   wall      CPU\n")
    for name, code, took, cpu in sorted(results, key=lambda r: -r[2]):
        say(f"{took:5.0f} s  {cpu:5.0f} s  {'ok    ' if code == 0 else 'FAILED'}  {name}\n")
    if failed:
        say(f"\nfailed: {', '.join(failed)}\n")
        sys.exit(1)


if __name__ == "__main__":
    main()
