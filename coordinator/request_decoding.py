"""Requests decoded by the coordinator itself: bytes that are no request of the method called (a
string field that is not UTF-8, a corrupt wire format) end INVALID_ARGUMENT with what protobuf
said, where grpc ended them UNKNOWN and logged a traceback for each."""

from __future__ import annotations

import inspect
from collections.abc import Callable

import grpc
from google.protobuf.message import DecodeError


class DecodeRequests(grpc.aio.ServerInterceptor):
    """Hands each unary-request handler its request's bytes, decoded in a wrapper that refuses
    undecodable ones; the handler's own kind (sync, coroutine, async generator) is kept."""

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        if handler is None or handler.request_streaming or handler.request_deserializer is None:
            return handler
        decode = handler.request_deserializer
        if handler.response_streaming:
            return grpc.unary_stream_rpc_method_handler(
                _decoding(handler.unary_stream, decode), response_serializer=handler.response_serializer)
        return grpc.unary_unary_rpc_method_handler(
            _decoding(handler.unary_unary, decode), response_serializer=handler.response_serializer)


def _refusal(err: DecodeError) -> str:
    return f"the request cannot be decoded ({err}) (send the method's request message, as proto/tvmfarm/v1 defines it)"


def _decoding(behaviour: Callable, decode: Callable) -> Callable:
    if inspect.isasyncgenfunction(behaviour):
        async def streaming(raw: bytes, context):
            try:
                request = decode(raw)
            except DecodeError as err:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, _refusal(err))
            async for response in behaviour(request, context):
                yield response

        return streaming
    if inspect.iscoroutinefunction(behaviour):
        async def awaiting(raw: bytes, context):
            try:
                request = decode(raw)
            except DecodeError as err:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, _refusal(err))
            return await behaviour(request, context)

        return awaiting

    def blocking(raw: bytes, context):
        try:
            request = decode(raw)
        except DecodeError as err:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, _refusal(err))
        return behaviour(request, context)

    return blocking
