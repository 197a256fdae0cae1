// waft-world: http-lambda
// `webhook` in JavaScript: POSTs a JSON document to a URL and judges the
// answer as the Rust `webhook` sample does. `{"url":
// "https://hooks.example.com/x", "body": {...}, "timeout_ms": 5000,
// "sleep_ms": 0, "signal": "approved", "signal_ms": 1000}` (`body` defaults
// to `{}`; with `sleep_ms`, it sleeps that long after the answer, with
// `waft.sleep`; with `signal`, it then waits that long for that signal,
// whose payload is the output's `signal`).
//
// 2xx is a success, its output `{"status", "body", "idempotency_key"}`; 429
// and 5xx are retriable, after the server's `Retry-After` (seconds) when it
// gives one; any other status is fatal. A failure to get an answer is
// retriable: `fetch` reports a refused destination as it does a network
// failure, so a missing grant shows as retries, each refusal in the task's
// log with the pattern to add.
//
// Configuration: the secret `WEBHOOK_TOKEN`, when set, is sent as a bearer
// token; the variable `SOURCE`, when set, as the `x-waft-source` header.

import * as waft from "../../../sdk/js/waft.js";

export const handler = waft.handler(async (task) => {
  const {
    url,
    body = {},
    timeout_ms: timeoutMs,
    sleep_ms: sleepMs,
    signal: signalName,
    signal_ms: signalMs = 0,
  } = task.json();
  const headers = { "content-type": "application/json" };
  const token = waft.config("WEBHOOK_TOKEN");
  if (token !== undefined) headers.authorization = `Bearer ${token}`;
  const source = waft.config("SOURCE");
  if (source !== undefined) headers["x-waft-source"] = source;
  const init = { method: "POST", headers, body: JSON.stringify(body ?? {}) };
  if (timeoutMs !== undefined) init.signal = AbortSignal.timeout(timeoutMs);
  let response;
  try {
    response = await waft.fetch(url, init);
  } catch (failure) {
    return waft.retry(`${url}: ${failure}`);
  }
  const text = await response.text();
  const status = response.status;
  if (sleepMs) await waft.sleep(sleepMs);
  let signal = null;
  if (signalName) {
    const payload = await waft.waitSignal(signalName, signalMs);
    signal = payload === null ? null : new TextDecoder().decode(payload);
  }
  if (status >= 200 && status < 300) {
    return waft.success({
      status,
      body: text,
      idempotency_key: `${task.idempotencyKey()}-0`,
      signal,
    });
  }
  if (status === 429 || status >= 500) {
    const seconds = Number.parseInt(response.headers.get("retry-after") ?? "", 10);
    return waft.retry(`${url} answered ${status}`, Number.isNaN(seconds) ? undefined : seconds * 1000);
  }
  return waft.fatal(`${url} answered ${status}: ${text}`);
});
