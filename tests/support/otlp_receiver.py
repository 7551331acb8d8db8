"""A real OTLP/HTTP trace receiver on loopback: what a collector would get.

``POST /v1/traces`` bodies (protobuf, gzip or not) are decoded with the official
``opentelemetry-proto`` messages into :class:`ReceivedSpan` values, so tests assert
on what actually crossed the wire. ``hold()`` makes the receiver take requests
and answer none until ``release()``: a collector that hangs.
"""

from __future__ import annotations

import datetime as dt
import gzip
import threading
from dataclasses import dataclass
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from tests.support.http_servers import Hit, LocalServer, Reply

TRACES_PATH = "/v1/traces"


def any_value(value: AnyValue) -> Any:
    """An OTLP attribute value as plain Python (lists stay lists)."""
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [any_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return attributes_of(value.kvlist_value.values)
    if kind is None:
        return None
    return getattr(value, kind)


def attributes_of(pairs: Any) -> dict[str, Any]:
    return {pair.key: any_value(pair.value) for pair in pairs}


def _time(ns: int) -> dt.datetime:
    seconds, rest = divmod(ns, 10**9)
    moment = dt.datetime.fromtimestamp(seconds, dt.UTC)
    return moment + dt.timedelta(microseconds=rest // 1000)


@dataclass(frozen=True)
class ReceivedSpan:
    """One span as the receiver decoded it (ids as lowercase hex)."""

    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    kind: str  # SPAN_KIND_INTERNAL, SPAN_KIND_CLIENT, ...
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    status: str  # STATUS_CODE_UNSET, STATUS_CODE_OK, STATUS_CODE_ERROR
    status_message: str
    resource: dict[str, Any]
    scope_name: str
    schema_url: str

    @property
    def start(self) -> dt.datetime:
        return _time(self.start_ns)

    @property
    def end(self) -> dt.datetime:
        return _time(self.end_ns)


def decode(body: bytes) -> list[ReceivedSpan]:
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    spans: list[ReceivedSpan] = []
    for resource_spans in request.resource_spans:
        resource = attributes_of(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append(
                    ReceivedSpan(
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex(),
                        name=span.name,
                        kind=Span.SpanKind.Name(span.kind),
                        start_ns=span.start_time_unix_nano,
                        end_ns=span.end_time_unix_nano,
                        attributes=attributes_of(span.attributes),
                        status=Status.StatusCode.Name(span.status.code),
                        status_message=span.status.message,
                        resource=resource,
                        scope_name=scope_spans.scope.name,
                        schema_url=scope_spans.schema_url,
                    )
                )
    return spans


class OtlpReceiver(LocalServer):
    """A collector's OTLP/HTTP endpoint; ``endpoint`` is what
    ``OTEL_EXPORTER_OTLP_ENDPOINT`` takes (the exporter adds ``/v1/traces``)."""

    def __init__(self) -> None:
        super().__init__(self._respond)
        self._spans: list[ReceivedSpan] = []
        self._open = threading.Event()
        self._open.set()
        self.requests = 0

    def _respond(self, hit: Hit) -> Reply:
        with self._lock:
            self.requests += 1
        # A hung collector: the request is in, the answer never comes (until
        # release or stop).
        while not self._open.wait(0.05):
            if self.released.is_set():
                return Reply(status=503)
        if hit.method != "POST" or hit.path != TRACES_PATH:
            return Reply(status=404)
        body = hit.body
        if hit.headers.get("content-encoding") == "gzip":
            body = gzip.decompress(body)
        spans = decode(body)
        with self._lock:
            self._spans.extend(spans)
        # An ExportTraceServiceResponse with nothing rejected encodes as no bytes.
        return Reply(text="", content_type="application/x-protobuf")

    def stop(self) -> None:
        self._open.set()
        super().stop()

    @property
    def endpoint(self) -> str:
        return self.url("").rstrip("/")

    def hold(self) -> None:
        self._open.clear()

    def release(self) -> None:
        self._open.set()

    @property
    def spans(self) -> list[ReceivedSpan]:
        with self._lock:
            return list(self._spans)

    def trace(self, trace_id: str) -> list[ReceivedSpan]:
        return [s for s in self.spans if s.trace_id == trace_id]
