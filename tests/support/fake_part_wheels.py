#!/usr/bin/env python3
"""Writes small wheels shaped like the Qwen pair's PyPI parts, for testing
scripts/fetch_qwen_pair.py without the network or the real 1.6 GB of parts.

Usage: fake_part_wheels.py OUT_DIR
Writes OUT_DIR/wheels/fake_model_partN-1.0.0-py3-none-any.whl (N = 1..3), each holding
fake_model_partN/data/partNN.bin (pseudo-random bytes) with a RECORD giving its sha256 and size,
and OUT_DIR/manifest.json: {"fake": {file, package, version, parts, size, sha256}} for the
concatenation, in the form fetch_qwen_pair.py --manifest reads.
"""
import base64
import hashlib
import json
import os
import random
import sys
import zipfile


def main(out_dir):
    wheels = os.path.join(out_dir, "wheels")
    os.makedirs(wheels, exist_ok=True)
    rng = random.Random(17)
    whole = hashlib.sha256()
    total = 0
    for i in range(1, 4):
        data = bytes(rng.getrandbits(8) for _ in range(3000 + 1000 * i))
        whole.update(data)
        total += len(data)
        dist = f"fake_model_part{i}"
        member = f"{dist}/data/part{i:02d}.bin"
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record = f"{member},sha256={digest},{len(data)}\n{dist}-1.0.0.dist-info/RECORD,,\n"
        with zipfile.ZipFile(os.path.join(wheels, f"{dist}-1.0.0-py3-none-any.whl"), "w",
                             zipfile.ZIP_DEFLATED) as zf:
            zf.writestr(member, data)
            zf.writestr(f"{dist}-1.0.0.dist-info/RECORD", record)
    manifest = {"fake": dict(file="fake-model.gguf", package="fake-model-part", version="1.0.0",
                             parts=3, size=total, sha256=whole.hexdigest())}
    with open(os.path.join(out_dir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
