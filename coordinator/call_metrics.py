"""Each gRPC call the coordinator answers, counted by method and status code and timed by method.

The names and labels are go-grpc-prometheus's (`grpc_server_handled_total`,
`grpc_server_handling_seconds`), which dashboards and alerts written for gRPC servers expect.
The interceptor is the server's first, so calls refused by the token check or the registry gate
are counted too. Methods the coordinator does not serve are counted as `unknown`: a caller
choosing method names must not choose the metrics' labels.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable

import grpc
from grpc_health.v1 import health_pb2
from prometheus_client import Counter, Histogram

from coordinator.metrics import REGISTRY
from foundation.wire import farm_pb2

HANDLED = Counter("grpc_server_handled", "gRPC calls the coordinator ended, by method and status code.",
                  ["grpc_service", "grpc_method", "grpc_type", "grpc_code"], registry=REGISTRY)
# From 1 ms (a heartbeat answered from memory) to a minute (a long-polled LeaseShard, a WatchJob
# stream, whose type tells them apart).
HANDLING = Histogram("grpc_server_handling_seconds", "Time from a gRPC call's start to its end, by method.",
                     ["grpc_service", "grpc_method", "grpc_type"], registry=REGISTRY,
                     buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60))

UNKNOWN = ("unknown", "unknown", "unknown")


def _call_type(method) -> str:
    return {(False, False): "unary", (False, True): "server_stream", (True, False): "client_stream",
            (True, True): "bidi_stream"}[(method.client_streaming, method.server_streaming)]


def served_methods() -> dict[str, tuple[str, str, str]]:
    """`/package.Service/Method` -> its labels (service, method, type), for every method served."""
    services = [*farm_pb2.DESCRIPTOR.services_by_name.values(), *health_pb2.DESCRIPTOR.services_by_name.values()]
    return {f"/{service.full_name}/{method.name}": (service.full_name, method.name, _call_type(method))
            for service in services for method in service.methods}


class CallMetrics(grpc.aio.ServerInterceptor):
    """Wraps each handler's behaviour (sync, coroutine or generator, as it is) to time it and to
    read the status it ended with."""

    def __init__(self):
        self._methods = served_methods()

    async def intercept_service(self, continuation, handler_call_details):
        labels = self._methods.get(handler_call_details.method, UNKNOWN)
        handler = await continuation(handler_call_details)
        if handler is None:  # grpc answers UNIMPLEMENTED itself, having run nothing
            HANDLED.labels(*labels, grpc.StatusCode.UNIMPLEMENTED.name).inc()
            return None
        kind = f"{'stream' if handler.request_streaming else 'unary'}_" \
               f"{'stream' if handler.response_streaming else 'unary'}"
        make = getattr(grpc, f"{kind}_rpc_method_handler")
        return make(_timed(getattr(handler, kind), labels), request_deserializer=handler.request_deserializer,
                    response_serializer=handler.response_serializer)


class _Ending:
    """A handler's context that notes the status code the handler ends the call with: the context
    grpc.aio gives a plain function (run in the thread pool) cannot be asked for it afterwards."""

    def __init__(self, context):
        self._context = context
        self.code: grpc.StatusCode | None = None

    def __getattr__(self, name):
        return getattr(self._context, name)

    def set_code(self, code: grpc.StatusCode) -> None:
        self.code = code
        self._context.set_code(code)


class _PlainEnding(_Ending):
    def abort(self, code: grpc.StatusCode, details: str = "", trailing_metadata=()):
        self.code = code
        return self._context.abort(code, details, trailing_metadata)


class _AsyncEnding(_Ending):
    async def abort(self, code: grpc.StatusCode, details: str = "", trailing_metadata=()):
        self.code = code
        await self._context.abort(code, details, trailing_metadata)

    async def abort_with_status(self, status: grpc.Status):
        self.code = status.code
        await self._context.abort_with_status(status)


def _ended(labels: tuple[str, str, str], began: float, context: _Ending, err: BaseException | None) -> None:
    HANDLING.labels(*labels).observe(time.perf_counter() - began)
    HANDLED.labels(*labels, _status(context.code, err).name).inc()


def _status(code: grpc.StatusCode | None, err: BaseException | None) -> grpc.StatusCode:
    if code is not None:  # an abort's or set_code's
        return code
    if err is None:
        return grpc.StatusCode.OK
    if isinstance(err, asyncio.CancelledError):
        return grpc.StatusCode.CANCELLED
    return grpc.StatusCode.UNKNOWN  # what grpc answers for an exception the handler let out


def _timed(behaviour: Callable, labels: tuple[str, str, str]) -> Callable:
    if inspect.isasyncgenfunction(behaviour):
        async def streaming(request, context):
            began, err, ending = time.perf_counter(), None, _AsyncEnding(context)
            try:
                async for response in behaviour(request, ending):
                    yield response
            except BaseException as raised:
                err = raised
                raise
            finally:
                _ended(labels, began, ending, err)

        return streaming
    if inspect.iscoroutinefunction(behaviour):
        async def awaiting(request, context):
            began, err, ending = time.perf_counter(), None, _AsyncEnding(context)
            try:
                return await behaviour(request, ending)
            except BaseException as raised:
                err = raised
                raise
            finally:
                _ended(labels, began, ending, err)

        return awaiting
    if inspect.isgeneratorfunction(behaviour):
        def yielding(request, context):
            began, err, ending = time.perf_counter(), None, _PlainEnding(context)
            try:
                yield from behaviour(request, ending)
            except BaseException as raised:
                err = raised
                raise
            finally:
                _ended(labels, began, ending, err)

        return yielding

    def blocking(request, context):
        began, err, ending = time.perf_counter(), None, _PlainEnding(context)
        try:
            return behaviour(request, ending)
        except BaseException as raised:
            err = raised
            raise
        finally:
            _ended(labels, began, ending, err)

    return blocking
