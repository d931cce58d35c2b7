#!/usr/bin/env bash
# Fetch the wheels the GPU host lacks into .whl/ (gitignored), for scripts/gpu_session.sh to install:
#
#   bash scripts/fetch_gpu_wheels.sh          # then call the device with carry [".whl"]
#
# The GPU host (docs/gpu.md) has Python 3.12, torch and most of Ray's needs (click, filelock,
# msgpack, packaging, protobuf, pyyaml, requests, grpcio, attrs, typing-extensions) but no network:
#   - Ray (its cp312 manylinux wheel, ~79 MB) with its Java jars dropped (ray/jars/, ~32 MB; only
#     Java workers use them): tests/gpu/test_ray_gpu.py starts a local Ray head there;
#   - what Ray's core imports and the host lacks: jsonschema, jsonschema-specifications,
#     referencing, rpds-py (a cp312 wheel);
#   - GitPython, gitdb, smmap: the accept tests and the drop-in bench commit with GitPython.
# Versions are pinned to what this project's venv was tested with (Ray's client needs the same Ray
# version on both ends). The total must stay under the device's carry limit (64 MiB for the whole
# working tree): the script fails above CARRY_LIMIT_MIB.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
DEST="${1:-.whl}"
CARRY_LIMIT_MIB="${CARRY_LIMIT_MIB:-60}"
WHEELS=(ray==2.60.0 jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0
        rpds-py==2026.9.1 GitPython==3.2.1 gitdb==4.0.12 smmap==5.0.3)

download=$(mktemp -d)
trap 'rm -rf "$download"' EXIT
"$PYTHON" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform manylinux1_x86_64 -d "$download" "${WHEELS[@]}"

mkdir -p "$DEST"
rm -f "$DEST"/ray-*.whl "$DEST"/jsonschema*.whl "$DEST"/referencing-*.whl "$DEST"/rpds_py-*.whl \
  "$DEST"/[Gg]it[Pp]ython-*.whl "$DEST"/gitdb-*.whl "$DEST"/smmap-*.whl  # one version of each
# Copy every wheel; Ray's without ray/jars/ (and without their lines in its RECORD, so pip's
# install stays consistent), as /work/shared/tools/trim_ray_wheel.py does.
"$PYTHON" - "$download" "$DEST" <<'EOF'
import pathlib
import shutil
import sys
import zipfile

source, dest = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
for wheel in sorted(source.glob("*.whl")):
    if not wheel.name.startswith("ray-"):
        shutil.copy(wheel, dest / wheel.name)
        continue
    with zipfile.ZipFile(wheel) as zin, zipfile.ZipFile(dest / wheel.name, "w", zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            if info.filename.startswith("ray/jars/"):
                continue
            data = zin.read(info)
            if info.filename.endswith(".dist-info/RECORD"):
                kept = [line for line in data.decode().splitlines() if not line.startswith("ray/jars/")]
                data = ("\n".join(kept) + "\n").encode()
            zout.writestr(info, data)
    print(f"{wheel.name}: {wheel.stat().st_size / 2**20:.1f} MiB -> {(dest / wheel.name).stat().st_size / 2**20:.1f} MiB "
          "(Java jars dropped)")
EOF

total=$(du -cb "$DEST"/*.whl | tail -1 | cut -f1)
ls -l "$DEST"/*.whl | awk '{printf "  %6.1f MiB  %s\n", $5 / 1048576, $9}'
echo "total: $(awk -v b="$total" 'BEGIN { printf "%.1f", b / 1048576 }') MiB in $DEST (limit ${CARRY_LIMIT_MIB} MiB)"
if (( total > CARRY_LIMIT_MIB * 1048576 )); then
  echo "fetch_gpu_wheels.sh: $DEST is over ${CARRY_LIMIT_MIB} MiB: the device cannot carry it" >&2
  exit 1
fi
