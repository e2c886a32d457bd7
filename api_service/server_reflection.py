"""gRPC server reflection, v1 and v1alpha, answering with descriptors that keep the .proto comments.

grpcio-reflection (1.85) serves only v1alpha, and from the process's descriptor pool, whose files have
lost their source info: `grpcurl describe` would show no comments. This servicer answers from the
descriptor set that scripts/generate_stubs.sh writes with source info, under both service names; current
clients (grpcurl, Postman, grpcui) ask for v1 first, older ones for v1alpha.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from importlib import resources
from typing import Protocol

import grpc
from google.protobuf import any_pb2, descriptor_pb2, descriptor_pool, duration_pb2
from google.protobuf.descriptor import FileDescriptor
from google.rpc import error_details_pb2, status_pb2
from grpc_health.v1 import health_pb2
from grpc_reflection.v1alpha import reflection_pb2

DESCRIPTOR_SET_PACKAGE = "jobs.v1"
DESCRIPTOR_SET_FILE = "descriptor_set.binpb"
REFLECTION_V1 = "grpc.reflection.v1.ServerReflection"
REFLECTION_V1ALPHA = "grpc.reflection.v1alpha.ServerReflection"
_METHOD = "ServerReflectionInfo"
_V1ALPHA_PACKAGE = "grpc.reflection.v1alpha"
_V1_PACKAGE = "grpc.reflection.v1"


def committed_descriptor_set() -> descriptor_pb2.FileDescriptorSet:
    """The API's files with their comments and their google/protobuf imports, as `make generate` wrote them."""
    data = resources.files(DESCRIPTOR_SET_PACKAGE).joinpath(DESCRIPTOR_SET_FILE).read_bytes()
    return descriptor_pb2.FileDescriptorSet.FromString(data)


class _FileDescriptorLike(Protocol):
    """The stubs type a generated module's DESCRIPTOR as upb's FileDescriptor, unrelated there to
    google.protobuf.descriptor's; both copy the same way, which is all _copy needs."""

    def CopyToProto(self, proto: descriptor_pb2.FileDescriptorProto, /) -> None: ...


def _copy(file: _FileDescriptorLike) -> descriptor_pb2.FileDescriptorProto:
    proto = descriptor_pb2.FileDescriptorProto()
    file.CopyToProto(proto)
    return proto


def _reflection_v1_file() -> descriptor_pb2.FileDescriptorProto:
    """grpc.reflection.v1 is v1alpha renamed, message for message and field for field (grpc's own
    reflection.proto says so), so its descriptor is v1alpha's under the new names, and v1alpha's message
    classes encode it."""
    proto = _copy(reflection_pb2.DESCRIPTOR)
    proto.name = "grpc/reflection/v1/reflection.proto"
    proto.package = _V1_PACKAGE
    proto.ClearField("options")
    old, new = f".{_V1ALPHA_PACKAGE}.", f".{_V1_PACKAGE}."
    for message in proto.message_type:
        for field in message.field:
            if field.type_name.startswith(old):
                field.type_name = field.type_name.replace(old, new)
    for service in proto.service:
        for method in service.method:
            method.input_type = method.input_type.replace(old, new)
            method.output_type = method.output_type.replace(old, new)
    return proto


class DescriptorFiles:
    """Every file reflection can serve, serialized, and a pool over them for symbol look-ups."""

    def __init__(self, files: Iterable[descriptor_pb2.FileDescriptorProto]) -> None:
        self._pool = descriptor_pool.DescriptorPool()
        self._serialized: dict[str, bytes] = {}
        for file in files:  # dependencies first, as protoc's --include_imports writes them
            if file.name not in self._serialized:
                self._serialized[file.name] = file.SerializeToString()
                self._pool.AddSerializedFile(self._serialized[file.name])

    @classmethod
    def for_api(cls) -> DescriptorFiles:
        """The API's files with their comments, then health, both reflection versions and the google.rpc
        error details every error carries (no comments): a client that decodes the grpc-status-details-bin
        trailer (grpcurl does) finds google.rpc.Status, ErrorInfo, BadRequest and RetryInfo here."""
        extra = (
            _copy(health_pb2.DESCRIPTOR),
            _copy(reflection_pb2.DESCRIPTOR),
            _reflection_v1_file(),
            # Dependencies first, as the pool needs them: Any (Status.details), Duration (RetryInfo).
            _copy(any_pb2.DESCRIPTOR),
            _copy(duration_pb2.DESCRIPTOR),
            _copy(status_pb2.DESCRIPTOR),
            _copy(error_details_pb2.DESCRIPTOR),
        )
        return cls([*committed_descriptor_set().file, *extra])

    def with_dependencies(self, name: str) -> list[bytes]:
        """The file and everything it imports, transitively; KeyError for an unknown file."""
        ordered: dict[str, bytes] = {}
        pending = [self._pool.FindFileByName(name)]
        while pending:
            file = pending.pop()
            if file.name not in ordered:
                ordered[file.name] = self._serialized[file.name]
                pending.extend(file.dependencies)
        return list(ordered.values())

    def file_containing_symbol(self, symbol: str) -> str:
        try:
            return self._pool.FindFileContainingSymbol(symbol).name
        except KeyError:
            # The pool does not index methods; `grpcurl describe jobs.v1.JobService.GetJob` asks for one.
            service_name, _, method = symbol.rpartition(".")
            service = self._pool.FindServiceByName(service_name)
            if method not in service.methods_by_name:
                raise
            return service.file.name

    def file_containing_extension(self, containing_type: str, number: int) -> str:
        message = self._pool.FindMessageTypeByName(containing_type)
        extension = self._pool.FindExtensionByNumber(message, number)
        # types-protobuf's FieldDescriptor omits `file`, which every protobuf implementation sets.
        file: FileDescriptor = extension.file  # type: ignore[attr-defined]
        return file.name

    def extension_numbers(self, containing_type: str) -> tuple[str, list[int]]:
        message = self._pool.FindMessageTypeByName(containing_type)
        return message.full_name, sorted(ext.number for ext in self._pool.FindAllExtensions(message))


class ServerReflection:
    """The ServerReflectionInfo stream: one response per request, NOT_FOUND for what it does not know."""

    def __init__(self, files: DescriptorFiles, service_names: Iterable[str]) -> None:
        self._files = files
        self._services = sorted({*service_names, REFLECTION_V1, REFLECTION_V1ALPHA})

    async def info(
        self,
        requests: AsyncIterator[reflection_pb2.ServerReflectionRequest],
        context: grpc.aio.ServicerContext[
            reflection_pb2.ServerReflectionRequest, reflection_pb2.ServerReflectionResponse
        ],
    ) -> AsyncIterator[reflection_pb2.ServerReflectionResponse]:
        async for request in requests:
            yield self.answer(request)

    def answer(self, request: reflection_pb2.ServerReflectionRequest) -> reflection_pb2.ServerReflectionResponse:
        response = reflection_pb2.ServerReflectionResponse(original_request=request)
        kind = request.WhichOneof("message_request")
        try:
            if kind == "list_services":
                response.list_services_response.service.extend(
                    reflection_pb2.ServiceResponse(name=name) for name in self._services
                )
            elif kind == "file_by_filename":
                self._files_of(response, request.file_by_filename)
            elif kind == "file_containing_symbol":
                self._files_of(response, self._files.file_containing_symbol(request.file_containing_symbol))
            elif kind == "file_containing_extension":
                wanted = request.file_containing_extension
                self._files_of(
                    response, self._files.file_containing_extension(wanted.containing_type, wanted.extension_number)
                )
            elif kind == "all_extension_numbers_of_type":
                base, numbers = self._files.extension_numbers(request.all_extension_numbers_of_type)
                response.all_extension_numbers_response.base_type_name = base
                response.all_extension_numbers_response.extension_number.extend(numbers)
            else:
                return _error(response, grpc.StatusCode.INVALID_ARGUMENT, "no request in the message")
        except KeyError:
            return _error(response, grpc.StatusCode.NOT_FOUND, "not found")
        return response

    def _files_of(self, response: reflection_pb2.ServerReflectionResponse, name: str) -> None:
        response.file_descriptor_response.file_descriptor_proto.extend(self._files.with_dependencies(name))

    def add_to(self, server: grpc.aio.Server) -> None:
        handler = grpc.stream_stream_rpc_method_handler(
            self.info,
            request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
            response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString,
        )
        server.add_generic_rpc_handlers(
            [
                grpc.method_handlers_generic_handler(name, {_METHOD: handler})
                for name in (REFLECTION_V1, REFLECTION_V1ALPHA)
            ]
        )


def _error(
    response: reflection_pb2.ServerReflectionResponse, code: grpc.StatusCode, message: str
) -> reflection_pb2.ServerReflectionResponse:
    response.error_response.error_code = code.value[0]
    response.error_response.error_message = message
    return response
