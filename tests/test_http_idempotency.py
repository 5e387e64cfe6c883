"""`http_request` in a run: every attempt of a step sends the step's `Idempotency-Key`, the one a
plan wrote replaced, so a server that keeps keys carries out a retried request once."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from support.plans import step

from stratagem.domain.ledger import StepStatus

pytestmark = pytest.mark.workflow


class PaymentService:
    """A payment API that keeps idempotency keys, as Stripe's does: the first request of a key
    is carried out but its answer lost (a 503), a repeated one gets the stored answer and pays
    nothing more."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.payments: dict[str, dict[str, Any]] = {}
        self.port = 0

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"


@pytest.fixture
def payments() -> Iterator[PaymentService]:
    service = PaymentService()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            key = self.headers.get("Idempotency-Key")
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or "null")
            service.requests.append({"key": key, "keys": self.headers.get_all("Idempotency-Key"), "body": body})
            if key in service.payments:
                self._reply(200, service.payments[key])
                return
            service.payments[key or f"none-{len(service.requests)}"] = {"paid": body["amount"], "key": key}
            self._reply(503, {"error": "gateway timeout"})  # paid, but the answer is lost

        def _reply(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    service.port = httpd.server_address[1]
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield service
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


async def test_a_retried_request_carries_the_steps_key_and_pays_once(harness, payments, monkeypatch):
    monkeypatch.setenv("STRATAGEM_HTTP_ALLOWLIST", f"127.0.0.1:{payments.port}")
    # The plan names a key of its own: one that would be the same in every run of this plan.
    pay = step(
        "pay",
        "http_request",
        method="POST",
        url=payments.url("/payments"),
        json_body={"amount": 1200},
        headers={"Idempotency-Key": "vendor-42-first-payment"},
    )
    run = await harness.start({"goal": "pay once", "steps": [pay]}, auto_approve=True, step_max_attempts=3)
    outputs = (await run.result()).outputs
    record = (await run.ledger()).steps["pay"]

    key = f"{run.id}/{run.handle.first_execution_run_id}/pay/r1"
    assert (record.status, record.attempts) == (StepStatus.succeeded, 2)
    assert [r["keys"] for r in payments.requests] == [[key], [key]]
    assert list(payments.payments) == [key]  # one payment, though two requests reached the service
    assert outputs["pay"]["json"] == {"paid": 1200, "key": key}
