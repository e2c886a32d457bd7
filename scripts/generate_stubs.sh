#!/usr/bin/env bash
# Regenerates the Python stubs (and .pyi types) beside their .proto sources, with the pinned grpcio-tools,
# and the descriptor set that server reflection serves: with source info (the .proto comments, which
# grpcurl describe shows) and the imported google/protobuf files, which the stubs' built-in descriptors
# lack.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python}"
OUT="${1:-proto}"
PROTOS=(proto/jobs/v1/jobs.proto proto/jobs/v1/worker.proto proto/jobs/v1/admin.proto)
"$PYTHON" -m grpc_tools.protoc -I proto \
  --python_out="$OUT" --pyi_out="$OUT" --grpc_python_out="$OUT" \
  "${PROTOS[@]}"
"$PYTHON" -m grpc_tools.protoc -I proto \
  --include_source_info --include_imports \
  --descriptor_set_out="$OUT/jobs/v1/descriptor_set.binpb" \
  "${PROTOS[@]}"
