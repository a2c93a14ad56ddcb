"""The container executor's Podman command, for real: a busybox image built here (no registry), run
the way the shim runs a job (its own session, joined to the attempt's cgroup before exec), checked
from outside: output, exit code, environment, working directory, the cgroup the container's processes
are in, a memory kill counted by the job's cgroup, SIGTERM, SIGKILL and what is left behind."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.nodes.backends.process import containers as ct
from services.nodes.backends.process.cgroups import JobCgroup, Limits, probe

pytestmark = pytest.mark.timeout(180)

BUSYBOX = Path("/bin/busybox")  # Debian's busybox-static: one static binary, a whole userland
PODMAN = shutil.which("podman")
NODE = f"containers-test-{os.getpid()}"


def _podman(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", *args], capture_output=True, text=True, timeout=60, check=check)


# ---------------------------------------------------------------- the command line (no Podman needed)


def test_argv_carries_every_option_and_keeps_values_off_the_command_line():
    argv = ct.podman_argv(
        name="horizon-j1-2", image="localhost/img:1", command=["python", "train.py", "--lr", "0.1"],
        env={"HF_TOKEN": "secret", "MULTI": "a\nb"}, cwd="/home/ada/run", mounts=["/var/lib/horizon/j1/2"],
        devices=["/dev/nvidia3", "/dev/nvidiactl"], hooks_dir="/h", env_file="/h/env", extra_hooks_dirs=[],
        ulimits={"nproc": (100, 200), "nofile": (1024, 4096)})
    # Global options first, then `run`, then the image and the command as given.
    assert argv[:6] == ["podman", "--runtime", "runc", "--cgroup-manager=cgroupfs", "--hooks-dir", "/h"]
    run = argv.index("run")
    assert argv[-5:] == ["localhost/img:1", "python", "train.py", "--lr", "0.1"]
    options = argv[run + 1:-5]
    for option in ["--rm", "--name=horizon-j1-2", "--pull=never", "--cgroups=no-conmon", "--init",
                   "--sig-proxy=true", "--log-driver=passthrough", "--network=host", "--ipc=host", "--uts=host",
                   "--http-proxy=false", "--entrypoint=", "--ulimit=nofile=1024:4096", "--ulimit=nproc=100:200",
                   "--volume=/home/ada/run:/home/ada/run", "--volume=/var/lib/horizon/j1/2:/var/lib/horizon/j1/2",
                   "--workdir=/home/ada/run", "--env-file=/h/env", "--device=/dev/nvidia3",
                   "--device=/dev/nvidiactl"]:
        assert option in options, option
    # The token is in the file, not in `ps`; the two-line value cannot be in the file, so it is here.
    assert not any("secret" in a for a in argv)
    assert "--env=MULTI=a\nb" in options
    # Without a file, every variable is on the command line.
    inline = ct.podman_argv(name="n", image="i", command=["true"], env={"A": "1"}, cwd="/w", extra_hooks_dirs=[],
                            ulimits={})
    assert "--env=A=1" in inline and "--hooks-dir" not in inline and not any(a.startswith("--env-file") for a in inline)


def test_a_path_podman_cannot_mount_is_refused_and_names_are_podman_safe():
    with pytest.raises(ValueError, match="a:b"):
        ct.podman_argv(name="n", image="i", command=["true"], env={}, cwd="/w/a:b", ulimits={})
    assert ct.container_name("train_3[1]", 2) == "horizon-train_3_1_-2"
    assert ct.container_name("a/b c", 1) == "horizon-a_b_c-1"


def test_env_file_holds_the_one_line_variables_for_the_owner_only(tmp_path):
    path = tmp_path / "env"
    ct.write_env_file(path, {"A": "x=y", "B": " lead", "C": "a\nb", "D": ""})
    assert path.read_text() == "A=x=y\nB= lead\nD=\n"
    assert path.stat().st_mode & 0o777 == 0o600


def test_gpu_device_files_add_the_control_devices_that_exist(tmp_path):
    (tmp_path / "nvidiactl").touch()
    assert ct.gpu_device_files([1, 3], dev=tmp_path) == [
        str(tmp_path / "nvidia1"), str(tmp_path / "nvidia3"), str(tmp_path / "nvidiactl")]
    assert ct.gpu_device_files([], dev=tmp_path) == []


def test_ulimits_are_the_callers_with_nproc_capped():
    limits = ct.host_ulimits()
    assert set(limits) == {"nofile", "nproc"}
    assert limits["nproc"][1] <= ct.NPROC_CAP
    for soft, hard in limits.values():
        assert 0 <= soft <= hard


def test_no_podman_is_said_plainly():
    assert "not installed" in (ct.available(podman="/no/such/podman") or "")
    assert "not installed" in (ct.image_problem("busybox", podman="/no/such/podman") or "")


# ---------------------------------------------------------------- for real

real = pytest.mark.skipif(PODMAN is None, reason="podman is not installed (CI installs it: apt-get install podman "
                                                  "runc catatonit busybox-static)")


@pytest.fixture(scope="session")
def image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A busybox image imported from a root filesystem made here: bin/busybox and its applets."""
    if PODMAN is None:
        pytest.skip("podman is not installed")
    problem = ct.available()
    if problem:
        pytest.skip(f"containers cannot run here: {problem}")
    if not BUSYBOX.exists():
        pytest.skip(f"{BUSYBOX} is missing (apt-get install busybox-static)")
    root = tmp_path_factory.mktemp("rootfs")
    for name in ("bin", "tmp", "proc", "sys", "dev", "etc"):
        (root / name).mkdir()
    shutil.copy2(BUSYBOX, root / "bin" / "busybox")
    applets = subprocess.run([str(BUSYBOX), "--list"], capture_output=True, text=True, check=True).stdout.split()
    for applet in applets:
        if applet != "busybox":
            (root / "bin" / applet).symlink_to("busybox")
    archive = root.parent / "rootfs.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(root, arcname=".")
    tag = f"localhost/horizon-test-busybox:{os.getpid()}"
    _podman("import", "--quiet", str(archive), tag)
    try:
        yield tag
    finally:
        _podman("image", "rm", "--force", tag, check=False)


@pytest.fixture
def hierarchy():
    found = probe()
    if not found.usable:
        pytest.skip(f"no writable cgroups here: {found.problem}")
    yield found
    for root in found.roots.values():  # the per-node parent the tests' cgroups made
        for directory in (root / "horizon" / NODE,):
            try:
                directory.rmdir()
            except OSError:
                pass


class Run:
    """One container run as the shim runs a job: own session, in the attempt's cgroup, output to files."""

    def __init__(self, tmp: Path, hierarchy, image: str, command: list[str], *, job: str = "job",
                 memory_bytes: int = 256 << 20, env: dict[str, str] | None = None, cwd: Path | None = None) -> None:
        self.name = ct.container_name(f"{job}-{os.getpid()}", 1)
        self.dir = tmp / job
        self.dir.mkdir(exist_ok=True)
        self.cgroup: JobCgroup = hierarchy.cgroup(NODE, job, 1)
        self.cgroup.create(Limits(memory_bytes=memory_bytes, cpus_milli=1000))
        hooks = self.dir / "hooks"
        ct.write_cgroup_hook(hooks, self.cgroup.paths())
        env = env or {}
        ct.write_env_file(self.dir / "env", env)
        self.argv = ct.podman_argv(name=self.name, image=image, command=command, env=env,
                                   cwd=str(cwd or self.dir), mounts=[str(self.dir)], devices=[],
                                   hooks_dir=hooks, env_file=self.dir / "env")
        self.out, self.err = self.dir / "stdout", self.dir / "stderr"

    def start(self) -> "Run":
        with open(self.out, "wb") as out, open(self.err, "wb") as err:
            self.process = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, cwd=self.dir,
                                            start_new_session=True, preexec_fn=self.cgroup.join)  # as the shim
        return self

    def wait(self, timeout: float = 60) -> int:
        return self.process.wait(timeout=timeout)

    def running_in_container(self, timeout: float = 20) -> list[int]:
        """The cgroup's processes once the container's command runs (not only podman and conmon)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            commands = {pid: _comm(pid) for pid in self.cgroup.pids()}
            if "sleep" in commands.values():
                return list(commands)
            time.sleep(0.05)
        raise AssertionError(f"the container did not start: {self.err.read_text()}")

    def close(self) -> None:
        if self.process.poll() is None:
            self.cgroup.signal_all(signal.SIGKILL)
            self.process.wait(timeout=30)
        ct.cleanup(self.name)
        assert self.cgroup.remove(), f"cgroup {self.cgroup.relative} could not be removed"


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _containers() -> str:
    return _podman("ps", "--all", "--format", "{{.Names}}").stdout


@pytest.fixture
def run(tmp_path, hierarchy, image):
    made: list[Run] = []

    def make(command: list[str], **kw) -> Run:
        made.append(Run(tmp_path, hierarchy, image, command, **kw))
        return made[-1]

    yield make
    for r in made:
        r.close()


@real
def test_output_exit_code_environment_and_working_directory(run, tmp_path):
    work = tmp_path / "work dir"
    work.mkdir()
    (work / "input.txt").write_text("from the host\n")
    r = run(["sh", "-c", 'echo "out $GREETING|$SPACED|$EQ|$LINES"; pwd; cat input.txt; echo made > result.txt; '
             'echo oops >&2; grep -E "^[0-9]+:(memory|cpu|cpuset|pids|devices):" /proc/self/cgroup; exit 7'],
            env={"GREETING": "hello", "SPACED": " two words ", "EQ": "a=b", "LINES": "one\ntwo"}, cwd=work)
    started = time.monotonic()
    assert r.start().wait() == 7, r.err.read_text()
    elapsed = time.monotonic() - started
    out = r.out.read_text().splitlines()
    assert out[0] == "out hello| two words |a=b|one"
    assert out[1] == "two"
    assert out[2] == str(work)
    assert out[3] == "from the host"
    assert (work / "result.txt").read_text() == "made\n"  # the working directory is the host's, read-write
    assert r.err.read_text() == "oops\n"
    # The container's processes are in the job's cgroups; devices stays Podman's.
    cgroups = dict(line.split(":", 2)[1:] for line in out[4:])
    for controller in ("memory", "cpu", "cpuset", "pids"):
        assert cgroups[controller] == "/" + r.cgroup.relative, controller
    assert cgroups["devices"].startswith("/libpod_parent/libpod-")
    assert elapsed < 20
    assert r.name not in _containers()  # --rm


@real
def test_a_memory_hog_over_64m_is_killed_and_the_jobs_cgroup_counts_it(run):
    r = run(["sh", "-c", "echo start; head -c 200m /dev/zero | tail > /dev/null; echo survived $?"],
            job="hog", memory_bytes=64 << 20)
    assert r.start().wait() == 0  # sh survives; its pipeline was killed
    assert r.out.read_text() == "start\nsurvived 137\n"
    assert r.cgroup.oom_kills() >= 1


@real
def test_sigterm_to_podman_ends_the_container_promptly(run):
    r = run(["sh", "-c", "echo up; sleep 100; echo never"], job="term").start()
    inside = r.running_in_container()
    assert {"podman", "conmon", "sleep"} <= {_comm(p) for p in inside}
    started = time.monotonic()
    os.killpg(r.process.pid, signal.SIGTERM)  # what the agent does first
    assert r.wait(timeout=20) == 128 + signal.SIGTERM
    assert time.monotonic() - started < 5
    assert r.out.read_text() == "up\n"
    deadline = time.monotonic() + 10
    while r.cgroup.pids() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert r.cgroup.pids() == []
    assert r.name not in _containers()


@real
def test_sigkill_of_the_cgroup_then_cleanup_leaves_nothing(run):
    r = run(["sh", "-c", "sleep 100"], job="kill").start()
    r.running_in_container()
    cgroup_path = _podman("container", "inspect", "--format", "{{.State.CgroupPath}}", r.name).stdout.strip()
    r.cgroup.signal_all(signal.SIGKILL)  # the agent's last resort: podman, conmon and the container at once
    r.wait(timeout=20)
    assert r.name in _containers()  # Podman still lists it: nobody was left to remove it
    assert ct.cleanup(r.name)
    assert r.name not in _containers()
    assert [p for p in Path("/sys/fs/cgroup").glob(f"*{cgroup_path}")] == []  # runc's empty cgroups too
    assert ct.cleanup(r.name)  # idempotent
    # The attempt's name is free again (`podman run --replace` fails on such a leftover, 5 s later).
    again = subprocess.run(r.argv[:-3] + ["echo", "second"], capture_output=True, text=True, timeout=60,
                           preexec_fn=r.cgroup.join)
    assert (again.returncode, again.stdout) == (0, "second\n"), again.stderr


@real
def test_image_checks(image):
    assert ct.available() is None
    assert ct.image_problem(image) is None
    problem = ct.image_problem("localhost/horizon-no-such-image:0")
    assert problem is not None and "not on this node" in problem and "never pulls" in problem


@real
def test_a_missing_image_is_not_pulled(tmp_path, image):
    argv = ct.podman_argv(name=ct.container_name(f"missing-{os.getpid()}", 1),
                          image="localhost/horizon-no-such-image:0", command=["true"], env={}, cwd=str(tmp_path))
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 125
    assert "image not known" in done.stderr
