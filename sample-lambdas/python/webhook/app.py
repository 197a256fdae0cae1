# waft-world: http-lambda
"""`webhook` in Python: POSTs a JSON document to a URL and judges the answer
as the Rust `webhook` sample does. `{"url": "https://hooks.example.com/x",
"body": {...}, "timeout_ms": 5000, "sleep_ms": 0, "signal": "approved",
"signal_ms": 1000}` (`body` defaults to `{}`; with `sleep_ms`, it sleeps that
long after the answer, with `waft.sleep`; with `signal`, it then waits that
long for that signal, whose payload is the output's `signal`).

2xx is a success, its output `{"status", "body", "idempotency_key"}`; 429
and 5xx are retriable, after the server's `Retry-After` (seconds) when it
gives one; any other status is fatal. A refused destination is fatal (the
grant is missing); a timeout or a connection failure is retriable.

Configuration: the secret `WEBHOOK_TOKEN`, when set, is sent as a bearer
token; the variable `SOURCE`, when set, as the `x-waft-source` header.
"""

import waft
import waft_http


def call(task):
    request = task.json()
    url = request["url"]
    headers = {}
    token = waft.config("WEBHOOK_TOKEN")
    if token is not None:
        headers["authorization"] = f"Bearer {token}"
    source = waft.config("SOURCE")
    if source is not None:
        headers["x-waft-source"] = source
    try:
        response = waft_http.post(url, json=request.get("body") or {}, headers=headers,
                                  timeout_ms=request.get("timeout_ms"))
    except waft_http.HttpError as error:
        return waft.fatal(str(error)) if error.denied else waft.retry(str(error))
    status = response.status
    if request.get("sleep_ms"):
        waft.sleep(request["sleep_ms"] / 1000)
    signal = None
    if request.get("signal"):
        payload = waft.wait_signal(request["signal"], request.get("signal_ms", 0) / 1000)
        signal = None if payload is None else payload.decode("utf-8", "replace")
    if 200 <= status < 300:
        return waft.success({
            "status": status,
            "body": response.text(),
            "idempotency_key": f"{task.idempotency_key()}-0",
            "signal": signal,
        })
    if status == 429 or status >= 500:
        retry_after = response.headers.get("retry-after", "").strip()
        after_ms = int(retry_after) * 1000 if retry_after.isdigit() else None
        return waft.retry(f"{url} answered {status}", after_ms)
    return waft.fatal(f"{url} answered {status}: {response.text()}")


Handler = waft.handler(call)
