"""The Lambda base image the functions run in: AWS's where it can be pulled, otherwise an equivalent built here.

`sam local` runs a Python function in `public.ecr.aws/lambda/python:<version>-<architecture>`, with the Runtime
Interface Emulator that SAM CLI ships copied in. Where that registry cannot be reached, an image that does the same is
built from Debian's packages and PyPI, once, and kept in the daemon's cache (engine.cache_dir()) under a tag naming
its recipe (a change of recipe builds it again):

- `debootstrap --variant=minbase` of the Debian release whose Python is the runtime's (trixie: 3.13; bookworm: 3.11),
  with ca-certificates;
- in /var/runtime, the runtime interface client `awslambdaric` and the pinned runtime boto3
  (local/lambda-image/requirements.txt);
- /var/runtime/bootstrap, /lambda-entrypoint.sh (local/lambda-image/) and /var/lang/bin/python<version>, where AWS's
  images have them;
- `docker import` with the environment, working directory and entry point of AWS's images.

`sam local` is then told to use it (`--invoke-image`) and not to pull it (`--skip-pull-image`).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import platform
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from local.engine import cache_dir, docker, docker_environment
from local.process import LocalError, run

RECIPE_DIR = Path(__file__).resolve().parent / "lambda-image"
RUNTIME_REQUIREMENTS = Path(__file__).resolve().parents[1] / "requirements" / "lambda-runtime.txt"
LOCAL_REPOSITORY = "gpu-fault-responder/lambda-python"
DEBIAN_RELEASES = {"3.13": "trixie", "3.11": "bookworm"}
"""The Debian release whose python3 is each runtime's version (no release has 3.12)."""
DEBIAN_MIRROR = os.environ.get("DEBIAN_MIRROR", "http://deb.debian.org/debian")
# As AWS's Python base images set them (LANG: the C.UTF-8 locale Debian has without a locales package).
IMAGE_SETTINGS = [
    "ENV LANG=C.UTF-8",
    "ENV TZ=:/etc/localtime",
    "ENV PATH=/var/lang/bin:/usr/local/bin:/usr/bin/:/bin:/opt/bin",
    "ENV LD_LIBRARY_PATH=/var/lang/lib:/lib64:/usr/lib64:/var/runtime:/var/runtime/lib:/var/task:/var/task/lib"
    ":/opt/lib",
    "ENV LAMBDA_TASK_ROOT=/var/task",
    "ENV LAMBDA_RUNTIME_DIR=/var/runtime",
    "WORKDIR /var/task",
    'ENTRYPOINT ["/lambda-entrypoint.sh"]',
]
# What a Lambda function never reads: left out of the image (about a third of the release).
_TRIMMED = ["var/cache/apt/archives", "var/lib/apt/lists", "usr/share/doc", "usr/share/man", "usr/share/locale",
            "usr/share/info"]  # fmt: skip
_ARCHITECTURES = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "arm64", "arm64": "arm64"}
_PLATFORMS = {"x86_64": "x86_64-manylinux_2_28", "arm64": "aarch64-manylinux_2_28"}


@dataclass(frozen=True)
class LambdaImage:
    """The image and what `sam local` is told about it."""

    name: str
    official: bool
    note: str

    @property
    def sam_options(self) -> list[str]:
        return ["--skip-pull-image"] if self.official else ["--invoke-image", self.name, "--skip-pull-image"]


def official_name(version: str, architecture: str) -> str:
    return f"public.ecr.aws/lambda/python:{version}-{architecture}"


def host_architecture() -> str:
    machine = platform.machine()
    if machine not in _ARCHITECTURES:
        raise LocalError(f"no Lambda architecture runs on {machine}")
    return _ARCHITECTURES[machine]


def recipe_tag(version: str, architecture: str) -> str:
    """The local image's tag: the version, the architecture and a digest of everything it is built from."""
    digest = hashlib.sha256()
    for part in (version, architecture, DEBIAN_RELEASES.get(version, ""), *IMAGE_SETTINGS, *_TRIMMED):
        digest.update(part.encode() + b"\0")
    for path in [*sorted(RECIPE_DIR.iterdir()), RUNTIME_REQUIREMENTS]:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return f"{LOCAL_REPOSITORY}:{version}-{architecture}-{digest.hexdigest()[:12]}"


def ensure_image(runtime: str, architecture: str, uv: Path, out: TextIO, *, choice: str = "auto") -> LambdaImage:
    """AWS's image if the daemon has it or can pull it (choice `auto` or `official`), else the local equivalent,
    built if the cache does not hold it yet (`auto` or `local`)."""
    version = runtime.removeprefix("python")
    official = official_name(version, architecture)
    if choice in ("auto", "official"):
        if _present(official):
            return LambdaImage(official, True, "AWS's, cached")
        started = time.monotonic()
        pulled = run(["docker", "pull", "--quiet", official], env=docker_environment(), timeout=900, check=False)
        if pulled.returncode == 0:
            return LambdaImage(official, True, f"AWS's, pulled in {time.monotonic() - started:.0f} s")
        reason = (pulled.stderr.strip() or pulled.stdout.strip()).splitlines()[-1:] or ["no reason given"]
        if choice == "official":
            raise LocalError(f"cannot pull {official}: {reason[0]}")
        print(f"local: {official} cannot be pulled ({reason[0]}): using the local equivalent", file=out, flush=True)
    tag = recipe_tag(version, architecture)
    if _present(tag):
        return LambdaImage(tag, False, "built here from Debian and PyPI, cached")
    started = time.monotonic()
    build_image(tag, version, architecture, uv, out)
    return LambdaImage(tag, False, f"built here from Debian and PyPI in {time.monotonic() - started:.0f} s")


def build_image(tag: str, version: str, architecture: str, uv: Path, out: TextIO) -> None:
    """Build the local equivalent of AWS's image as `tag` (the module's docstring says how), and remove the local
    images of older recipes."""
    release = DEBIAN_RELEASES.get(version)
    if release is None:
        raise LocalError(
            f"no Debian release has Python {version}: build for python3.13 or python3.11 (make build-host finds the "
            f"newest Python this machine has), or use AWS's image ({official_name(version, architecture)})"
        )
    if architecture != host_architecture():
        raise LocalError(f"the local image is built for this machine ({host_architecture()}), not {architecture}")
    if shutil.which("debootstrap") is None:
        print("local: installing debootstrap (apt-get)", file=out, flush=True)
        run(["apt-get", "install", "-y", "--no-install-recommends", "debootstrap"],
            env={"DEBIAN_FRONTEND": "noninteractive"}, timeout=600)  # fmt: skip
    work = cache_dir() / f"build-{os.getpid()}"
    root = work / "root"
    shutil.rmtree(work, ignore_errors=True)
    root.mkdir(parents=True)
    try:
        started = time.monotonic()
        print(f"local: building {tag}: debootstrap {release} from {DEBIAN_MIRROR}", file=out, flush=True)
        run(
            ["debootstrap", "--variant=minbase", "--include=python3,ca-certificates", release, str(root),
             DEBIAN_MIRROR],
            timeout=1200,
        )  # fmt: skip
        if not (root / "usr" / "bin" / f"python{version}").exists():
            raise LocalError(f"Debian {release} did not install python{version}")
        print(f"local: debootstrap done in {time.monotonic() - started:.0f} s", file=out, flush=True)
        run(
            [str(uv), "pip", "install", "--quiet", "--target", str(root / "var" / "runtime"), "--python-version",
             version, "--python-platform", _PLATFORMS[architecture], "--only-binary", ":all:", "-r",
             str(RECIPE_DIR / "requirements.txt")],
            timeout=600,
        )  # fmt: skip
        _add_runtime_files(root, version)
        for trimmed in _TRIMMED:
            for entry in (root / trimmed).glob("*"):
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry)
                else:
                    entry.unlink()
        _import(root, tag)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for line in docker("images", "--format", "{{.Repository}}:{{.Tag}}", LOCAL_REPOSITORY).split():
        if line != tag and line.startswith(f"{LOCAL_REPOSITORY}:{version}-{architecture}-"):
            docker("rmi", line, check=False)


def _add_runtime_files(root: Path, version: str) -> None:
    bootstrap = (RECIPE_DIR / "bootstrap").read_text().replace("@VERSION@", version)
    (root / "var" / "runtime" / "bootstrap").write_text(bootstrap)
    (root / "var" / "runtime" / "bootstrap").chmod(0o755)
    shutil.copyfile(RECIPE_DIR / "lambda-entrypoint.sh", root / "lambda-entrypoint.sh")
    (root / "lambda-entrypoint.sh").chmod(0o755)
    lang = root / "var" / "lang" / "bin"
    lang.mkdir(parents=True)
    (lang / f"python{version}").symlink_to(f"/usr/bin/python{version}")
    (lang / "python3").symlink_to(f"python{version}")
    for directory in ("var/task", "opt"):
        (root / directory).mkdir(parents=True, exist_ok=True)


def _import(root: Path, tag: str) -> None:
    archive = root.parent / "root.tar"
    run(["tar", "--numeric-owner", "-C", str(root), "-cf", str(archive), "."], timeout=600)
    changes = [word for setting in IMAGE_SETTINGS for word in ("--change", setting)]
    run(["docker", "import", *changes, str(archive), tag], env=docker_environment(), timeout=600)


def _present(name: str) -> bool:
    with contextlib.suppress(LocalError):
        return run(["docker", "image", "inspect", name], env=docker_environment(), check=False).returncode == 0
    return False
