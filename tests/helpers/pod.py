"""A container of deploy/k8s/ovstream.yaml run as the kubelet would run it, as far as this
machine allows: in a mount namespace of its own (``unshare``) with the root filesystem
read-only, ``/tmp`` an empty tmpfs (the manifest's emptyDir), the Secret's files mounted
read-only where the manifest mounts them, as the manifest's numeric uid and gid
(``setpriv``), with the manifest's environment (its ConfigMap); its exec probes run the same
way inside its namespace (``nsenter``).

The image's /app is this checkout and its Python this interpreter with the checkout's
packages, bound read-only inside the emptyDir (``_staging``: reachable by the uid wherever
they live here; in the image they are /app and /usr/local).
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SCRATCH = "/mnt"
"""An existing directory a tmpfs goes on (in the pod's namespace only): the pod's root is
built under it and the process chrooted there, so that what it sees as / is the read-only
copy, for it and for its probes alike (``nsenter --root``)."""
NEW_ROOT = f"{SCRATCH}/root"
STAGE = f"{SCRATCH}/stage"
HERE = "/tmp/stage"
"""Inside the pod: this checkout, this interpreter and its packages, bound read-only inside
the emptyDir (a checkout may live under /tmp, an interpreter under a home no other uid may
enter; in the image they are /app and /usr/local)."""
APP = f"{HERE}/app"
VENV = "/tmp/venv"
_PY = f"python{sys.version_info.major}.{sys.version_info.minor}"


def _setup(secrets: str, secret_mount: str) -> list[str]:
    """The shell steps that build the pod's root (then ``chroot NEW_ROOT``)."""
    q = shlex.quote
    binds = {"app": str(ROOT), "python": sys.base_prefix, "site": sysconfig.get_paths()["purelib"]}
    steps = [
        f"mount -n -t tmpfs -o size=16m,mode=755 tmpfs {SCRATCH}",
        f"mkdir {NEW_ROOT} {STAGE}",
        f"mount -n --rbind / {NEW_ROOT}",
        f"mount -n -o remount,bind,ro {NEW_ROOT}",  # readOnlyRootFilesystem
        f"mount -n --bind {q(secrets)} {NEW_ROOT}{q(secret_mount)}",  # the Secret's volume
        f"mount -n -o remount,bind,ro {NEW_ROOT}{q(secret_mount)}",
        f"mount -n -t tmpfs -o size=16m,mode=755 tmpfs {STAGE}",
    ]
    for name, source in binds.items():
        steps += [
            f"mkdir {STAGE}/{name}",
            f"mount -n --bind {q(source)} {STAGE}/{name}",
            f"mount -n -o remount,bind,ro {STAGE}/{name}",
        ]
    steps += [
        f"mount -n -t tmpfs -o size=64m,mode=1777 tmpfs {NEW_ROOT}/tmp",  # the emptyDir
        f"mkdir {NEW_ROOT}{HERE}",
        f"mount -n --move {STAGE} {NEW_ROOT}{HERE}",
        f"mkdir -p {NEW_ROOT}{VENV}/bin {NEW_ROOT}{VENV}/lib/{_PY}",
        f"ln -s {HERE}/site {NEW_ROOT}{VENV}/lib/{_PY}/site-packages",
        f"ln -s {HERE}/python/bin/{_PY} {NEW_ROOT}{VENV}/bin/python",
        f"echo 'home = {HERE}/python/bin' > {NEW_ROOT}{VENV}/pyvenv.cfg",
    ]
    return steps


@dataclass
class Pod:
    """One container of a Deployment: ``start`` it, ``probe`` it, ``stop`` it."""

    name: str
    container: dict[str, Any]
    security: dict[str, Any]
    """The pod's securityContext (runAsUser, runAsGroup)."""
    env: dict[str, str]
    secrets: Path
    """A directory holding the Secret's keys as files (mounted where the manifest says)."""
    secret_mount: str
    log_path: Path
    proc: subprocess.Popen[bytes] | None = field(default=None)

    def _ids(self) -> list[str]:
        return [f"--reuid={self.security['runAsUser']}", f"--regid={self.security['runAsGroup']}", "--clear-groups"]

    def _env(self) -> dict[str, str]:
        keep = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL")}
        # the interpreter's own libpython, where its RPATH (a home no other uid enters) fails
        libs = {"LD_LIBRARY_PATH": f"{HERE}/python/lib"}
        return {**keep, **self.env, **libs, "PYTHONPATH": APP, "PYTHONDONTWRITEBYTECODE": "1"}

    def _command(self, args: list[str]) -> list[str]:
        assert args[0] == "ovstream", args
        return [f"{VENV}/bin/python", "-m", "workers.cli", *args[1:]]

    def start(self) -> None:
        os.makedirs(self.secret_mount, exist_ok=True)  # the mount point (the kubelet makes it)
        setup = " && ".join(_setup(str(self.secrets), self.secret_mount))
        command = self._command(["ovstream", *self.container["args"]])
        run = shlex.join(["chroot", NEW_ROOT, "setpriv", *self._ids(), "--", *command])
        log = open(self.log_path, "ab")  # noqa: SIM115 (the child keeps it)
        self.proc = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", f"{setup} && cd / && exec {run}"],
            env=self._env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()

    def probe(self, kind: str) -> tuple[int, str]:
        """Run the container's exec probe ``kind`` (livenessProbe, ...) inside its namespace as
        its uid: (exit code, output)."""
        assert self.proc is not None and self.proc.poll() is None, self.log()
        command = self.container[kind]["exec"]["command"]
        done = subprocess.run(
            [
                "nsenter",
                f"--target={self.proc.pid}",
                "--mount",
                "--root",
                "--wd=/",
                "setpriv",
                *self._ids(),
                "--",
                *self._command(command),
            ],
            env=self._env(),
            capture_output=True,
            text=True,
            timeout=60,
            cwd="/",
        )
        return done.returncode, (done.stdout + done.stderr).strip()

    def root_is_read_only(self) -> bool:
        """Whether root itself, inside the pod, is refused a write to its root filesystem."""
        assert self.proc is not None
        done = subprocess.run(
            ["nsenter", f"--target={self.proc.pid}", "--mount", "--root", "--wd=/", "touch", "/ovstream-ro-check"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        return done.returncode != 0 and "Read-only file system" in done.stderr

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            return self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
            raise AssertionError(f"{self.name} ignored SIGTERM") from None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
