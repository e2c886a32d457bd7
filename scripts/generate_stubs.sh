#!/usr/bin/env bash
# Regenerates the Python stubs (and .pyi types) beside their .proto sources, with the pinned grpcio-tools,
# and the descriptor set that server reflection serves: with source info (the .proto comments, which
# grpcurl describe shows) and the imported google/protobuf files, which the stubs' built-in descriptors
# lack.
#
# The SDK (sdk/python) carries its own copy of the JobService stubs under durable_jobs._proto, so that
# installing it adds no `jobs` package. The copy keeps the .proto file names (jobs/v1/jobs.proto), so a
# process that loads both copies registers the same file twice, which protobuf accepts; only the
# generated imports between stub modules are moved under the SDK's package.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python}"
OUT="${1:-proto}"
SDK_OUT="${2:-sdk/python/durable_jobs/_proto}"
PROTOS=(proto/jobs/v1/jobs.proto proto/jobs/v1/worker.proto proto/jobs/v1/admin.proto)
SDK_PROTOS=(proto/jobs/v1/jobs.proto)
"$PYTHON" -m grpc_tools.protoc -I proto \
  --python_out="$OUT" --pyi_out="$OUT" --grpc_python_out="$OUT" \
  "${PROTOS[@]}"
"$PYTHON" -m grpc_tools.protoc -I proto \
  --include_source_info --include_imports \
  --descriptor_set_out="$OUT/jobs/v1/descriptor_set.binpb" \
  "${PROTOS[@]}"

mkdir -p "$SDK_OUT/jobs/v1"
"$PYTHON" -m grpc_tools.protoc -I proto \
  --python_out="$SDK_OUT" --pyi_out="$SDK_OUT" --grpc_python_out="$SDK_OUT" \
  "${SDK_PROTOS[@]}"
sed -i -e 's/^from jobs\.v1 import /from durable_jobs._proto.jobs.v1 import /' \
  -e "s/'jobs\.v1\.\([a-z_]*_pb2\)'/'durable_jobs._proto.jobs.v1.\1'/" \
  "$SDK_OUT"/jobs/v1/*_pb2*.py "$SDK_OUT"/jobs/v1/*_pb2.pyi
for package in "$SDK_OUT" "$SDK_OUT/jobs" "$SDK_OUT/jobs/v1"; do
  [[ -f "$package/__init__.py" ]] || : >"$package/__init__.py"
done
