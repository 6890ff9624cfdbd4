"""The coordinator's door: every call but the health service's must carry the farm's token.

A refused call ends UNAUTHENTICATED with a message saying what to set. The standard health
service (grpc.health.v1) stays open, so that load balancers, Kubernetes probes and compose
healthchecks need no secret; it says SERVING or NOT_SERVING and nothing else.
"""

from __future__ import annotations

import hmac

import grpc

from foundation.wire.access import TOKEN_HELP, TOKEN_METADATA_KEY, TOKEN_SCHEME

HEALTH_METHOD_PREFIX = "/grpc.health.v1.Health/"


class TokenCheck(grpc.aio.ServerInterceptor):
    """A grpc.aio interceptor comparing each call's bearer token with the coordinator's."""

    def __init__(self, token: str):
        self._expected = (TOKEN_SCHEME + token).encode()
        self._missing = _refusal("this coordinator requires the farm's token, and the call carried none", TOKEN_HELP)
        self._wrong = _refusal("the call's token is not this coordinator's",
                               "use the token the coordinator was started with, from FARM_TOKEN or --token-file")

    async def intercept_service(self, continuation, handler_call_details):
        if handler_call_details.method.startswith(HEALTH_METHOD_PREFIX):
            return await continuation(handler_call_details)
        presented = None
        for key, value in handler_call_details.invocation_metadata or ():
            if key == TOKEN_METADATA_KEY:
                presented = value
                break
        if presented is None:
            return self._missing
        # Constant time: a comparison that stops at the first differing byte tells a patient
        # caller how much of its guess was right.
        if not hmac.compare_digest(presented.encode(), self._expected):
            return self._wrong
        return await continuation(handler_call_details)


def _refusal(problem: str, fix: str) -> grpc.RpcMethodHandler:
    """A handler that ends any call, unary or streaming, before reading its request."""
    message = f"{problem} ({fix})"

    async def refuse(request, context):
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, message)

    return grpc.unary_unary_rpc_method_handler(refuse)
