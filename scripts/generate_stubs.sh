#!/usr/bin/env bash
# Regenerates the Python stubs (and .pyi types) beside their .proto sources, with the pinned grpcio-tools.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python}"
OUT="${1:-proto}"
"$PYTHON" -m grpc_tools.protoc -I proto \
  --python_out="$OUT" --pyi_out="$OUT" --grpc_python_out="$OUT" \
  proto/jobs/v1/jobs.proto proto/jobs/v1/worker.proto
