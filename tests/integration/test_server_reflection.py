"""Server reflection of the API (in this process), v1 and v1alpha, answers with the .proto comments (what
`grpcurl describe` prints)."""

from __future__ import annotations

import grpc
import pytest
from google.protobuf import descriptor_pb2
from grpc_reflection.v1alpha import reflection_pb2

from tests.process_fixtures import ServiceStack

pytestmark = pytest.mark.timeout(120)

# v1 is v1alpha renamed, field for field: v1alpha's classes encode both versions' messages.
REFLECTION_METHODS = {
    "v1": "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
    "v1alpha": "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
}
# SourceCodeInfo paths: FileDescriptorProto.service (6) / message_type (4), then their field numbers.
JOB_SERVICE_PATH = (6, 0)
CANCEL_JOB_PATH = (6, 0, 2, 4)  # JobService.method[4]


def _ask(
    channel: grpc.Channel, version: str, requests: list[reflection_pb2.ServerReflectionRequest]
) -> list[reflection_pb2.ServerReflectionResponse]:
    call = channel.stream_stream(
        REFLECTION_METHODS[version],
        request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
        response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
    )
    return list(call(iter(requests), timeout=10))


def _files(response: reflection_pb2.ServerReflectionResponse) -> dict[str, descriptor_pb2.FileDescriptorProto]:
    protos = [
        descriptor_pb2.FileDescriptorProto.FromString(b)
        for b in response.file_descriptor_response.file_descriptor_proto
    ]
    return {proto.name: proto for proto in protos}


def _comment(file: descriptor_pb2.FileDescriptorProto, path: tuple[int, ...]) -> str:
    for location in file.source_code_info.location:
        if tuple(location.path) == path:
            return " ".join(location.leading_comments.split())
    return ""


def _field_comment(file: descriptor_pb2.FileDescriptorProto, message: str, field: str) -> str:
    index = next(i for i, m in enumerate(file.message_type) if m.name == message)
    number = next(i for i, f in enumerate(file.message_type[index].field) if f.name == field)
    return _comment(file, (4, index, 2, number))


@pytest.mark.parametrize("version", ["v1", "v1alpha"])
def test_reflection_serves_the_proto_comments(service_stack: ServiceStack, version: str) -> None:
    service_stack.start_api()
    channel = service_stack.channel()
    listed, by_symbol, by_method, missing = _ask(
        channel,
        version,
        [
            reflection_pb2.ServerReflectionRequest(list_services=""),
            reflection_pb2.ServerReflectionRequest(file_containing_symbol="jobs.v1.JobService"),
            reflection_pb2.ServerReflectionRequest(file_containing_symbol="jobs.v1.WorkerService.Heartbeat"),
            reflection_pb2.ServerReflectionRequest(file_containing_symbol="jobs.v1.NoSuchThing"),
        ],
    )

    names = {service.name for service in listed.list_services_response.service}
    assert {
        "jobs.v1.JobService",
        "jobs.v1.WorkerService",
        "grpc.health.v1.Health",
        "grpc.reflection.v1.ServerReflection",
        "grpc.reflection.v1alpha.ServerReflection",
    } <= names
    files = _files(by_symbol)
    assert set(files) == {"jobs/v1/jobs.proto", "google/protobuf/timestamp.proto"}, "the file and its imports"
    jobs_file = files["jobs/v1/jobs.proto"]
    assert _comment(jobs_file, JOB_SERVICE_PATH).startswith("What tenant callers use: submit jobs")
    assert "stops within milliseconds, by notification" in _comment(jobs_file, CANCEL_JOB_PATH)
    assert _field_comment(jobs_file, "SubmitJobRequest", "priority") == "Higher runs first; -1000 to 1000."
    worker_file = _files(by_method)["jobs/v1/worker.proto"]
    assert _field_comment(worker_file, "LeaseStatus", "held").startswith("False when the lease expired")
    assert missing.error_response.error_code == grpc.StatusCode.NOT_FOUND.value[0]


def test_reflection_describes_itself_in_both_versions(service_stack: ServiceStack) -> None:
    service_stack.start_api()
    channel = service_stack.channel()
    for version in REFLECTION_METHODS:
        (response,) = _ask(
            channel,
            version,
            [
                reflection_pb2.ServerReflectionRequest(
                    file_containing_symbol=f"grpc.reflection.{version}.ServerReflection"
                )
            ],
        )
        (file,) = _files(response).values()
        assert file.package == f"grpc.reflection.{version}"
        assert file.service[0].method[0].input_type == f".grpc.reflection.{version}.ServerReflectionRequest"


def test_reflection_serves_the_error_details_so_that_clients_decode_them(service_stack: ServiceStack) -> None:
    """grpcurl resolves a status's details (google.protobuf.Any) by their type names through reflection."""
    service_stack.start_api()
    channel = service_stack.channel()
    symbols = ["google.rpc.Status", "google.rpc.ErrorInfo", "google.rpc.BadRequest", "google.rpc.RetryInfo"]
    answers = _ask(channel, "v1", [reflection_pb2.ServerReflectionRequest(file_containing_symbol=s) for s in symbols])
    status_files, *detail_files = (_files(answer) for answer in answers)
    assert set(status_files) == {"google/rpc/status.proto", "google/protobuf/any.proto"}
    for files in detail_files:
        assert set(files) == {"google/rpc/error_details.proto", "google/protobuf/duration.proto"}
    details = detail_files[0]["google/rpc/error_details.proto"]
    assert {"ErrorInfo", "BadRequest", "RetryInfo"} <= {message.name for message in details.message_type}
