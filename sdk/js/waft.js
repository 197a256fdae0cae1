/**
 * Write Waft lambdas in JavaScript.
 *
 * A lambda is a function, sync or async, from a `Task` to an outcome
 * (`success`, `retry`, `fatal`); `handler` makes it the component's export:
 *
 *     import * as waft from "./waft.js";
 *
 *     export const handler = waft.handler((task) => {
 *       const { name = "world" } = task.json();
 *       waft.info(`greeting ${name}`);
 *       return waft.success({ greeting: `Hello, ${name}!` });
 *     });
 *
 * Build it with componentize-js against Waft's WIT (see docs/lambdas.md):
 *
 *     componentize-js app.js -w wit -n lambda \
 *         -d http -d fetch-event -o lambda.wasm
 *
 * A lambda that calls HTTP leaves `-d http` out, uses `waft.fetch`, and is
 * deployed with `--allow-outbound`. An exception the function does not
 * catch is a retriable failure carrying its message; use `fatal` for a
 * failure no retry mends.
 */

// componentize-js finds an import by its full name, version included: these
// name the `waft:lambda` version of `wit/lambda.wit`, which the runtime's
// tests/runtime/contract.rs checks.
import { beat } from "waft:lambda/heartbeat@0.2.3";
import { log as hostLog } from "waft:lambda/log@0.2.3";
import {
  schedule as hostSchedule,
  scheduleKeyed as hostScheduleKeyed,
  waitAll as hostWaitAll,
} from "waft:lambda/children@0.2.3";
import { wait as hostWaitSignal } from "waft:lambda/signals@0.2.3";
import { get as configGet } from "wasi:config/store@0.2.0-rc.1";

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** The task being run: its identity, attempt and payload. */
export class Task {
  constructor(raw) {
    this.id = raw.id;
    this.lambda = raw.lambda;
    this.collection = raw.collection;
    this.priority = raw.priority;
    this.attempt = raw.attempt;
    /** Milliseconds since the Unix epoch. */
    this.scheduledAtMs = Number(raw.scheduledAt);
    /** The payload's bytes (a Uint8Array). */
    this.payload = raw.payload;
  }

  /** The payload as UTF-8 text. */
  text() {
    return decoder.decode(this.payload);
  }

  /** The payload parsed as JSON (an empty payload is `{}`). */
  json() {
    return this.payload.length === 0 ? {} : JSON.parse(this.text());
  }

  /** A key naming this task's work, the same on every attempt. */
  idempotencyKey() {
    return `waft-${this.id}`;
  }
}

function bytes(output) {
  if (output === undefined || output === null) return undefined;
  if (output instanceof Uint8Array) return output;
  if (typeof output === "string") return encoder.encode(output);
  return encoder.encode(JSON.stringify(output));
}

/** Done; `output` is bytes, text, or anything JSON can encode. */
export function success(output) {
  return { tag: "success", val: bytes(output) };
}

/** Not done; try again (after `afterMs` milliseconds, if given). */
export function retry(message, afterMs) {
  return {
    tag: "retriable",
    val: {
      message: String(message),
      retryAfterMs: afterMs === undefined || afterMs === null ? undefined : BigInt(afterMs),
    },
  };
}

/** Not done and never will be: no retry. */
export function fatal(message) {
  return { tag: "fatal", val: String(message) };
}

/** The execution lost its lease: stop, with no further side effect. */
export class LeaseLost extends Error {
  constructor(reason) {
    super(`lease lost: ${reason}`);
    this.name = "LeaseLost";
  }
}

/** Says the execution is alive, optionally how far it got. */
export function heartbeat(progress) {
  try {
    beat(progress);
  } catch (error) {
    throw new LeaseLost(error.payload?.reason ?? String(error));
  }
}

/** Appends a record to the task's log; `fields` is an object of values. */
export function log(level, message, fields = {}) {
  hostLog(
    level,
    String(message),
    Object.entries(fields).map(([key, value]) => [key, String(value)]),
  );
}

export const debug = (message, fields) => log("debug", message, fields);
export const info = (message, fields) => log("info", message, fields);
export const warn = (message, fields) => log("warn", message, fields);
export const error = (message, fields) => log("error", message, fields);

/** The lambda's variable or secret `key`, or `fallback` if it has none. */
export function config(key, fallback) {
  try {
    return configGet(key) ?? fallback;
  } catch {
    return fallback;
  }
}

/** A child task that was not scheduled; `retriable` says whether to retry. */
export class ScheduleError extends Error {
  constructor(message, retriable) {
    super(message);
    this.name = "ScheduleError";
    this.retriable = retriable;
  }
}

/**
 * Schedules a child task of `lambda`; returns its id. `key` is the child's
 * key within its lambda (a customer, an account), which its limits per key
 * count by.
 */
export function schedule(lambda, payload, { collection, priority, delayMs, key } = {}) {
  const child = {
    lambda,
    payload: bytes(payload) ?? new Uint8Array(),
    collection,
    priority,
    notBefore: delayMs === undefined ? undefined : BigInt(Date.now() + delayMs),
  };
  try {
    return key == null ? hostSchedule(child) : hostScheduleKeyed(child, key);
  } catch (error) {
    const rejection = error.payload;
    if (rejection?.tag === "lease-lost") throw new LeaseLost(rejection.val.reason);
    throw new ScheduleError(String(rejection?.val ?? error), rejection?.tag === "unavailable");
  }
}

const execution = { key: undefined, requests: 0 };

/**
 * `fetch`, with an `Idempotency-Key` header the same on every attempt of
 * the task (its key and the request's rank within the execution), unless
 * the request sets one. Only destinations the lambda was granted are
 * reached; a refused one rejects like a network failure (`fetch` tells the
 * two apart no further), and the task's log says what was refused.
 */
export function fetch(resource, init = {}) {
  const headers = new Headers(init.headers ?? {});
  const rank = execution.requests++;
  if (!headers.has("idempotency-key") && execution.key !== undefined) {
    headers.set("idempotency-key", `${execution.key}-${rank}`);
  }
  return globalThis.fetch(resource, { ...init, headers });
}

/**
 * Resolves after `ms` milliseconds, durably: a wait past the executor's
 * `suspend_after` (1 s by default) suspends the task — its instance
 * dropped, its slot freed — until the time has come, and the next
 * execution replays the journal up to here (docs/durable.md, "Durable sleep").
 * `setTimeout` behaves the same way; this says so where it is called.
 */
export function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/**
 * Resolves with the payload (a `Uint8Array`) of the signal `name` sent to
 * this task (`waft task signal`), or `null` when `timeoutMs` passed first.
 * A signal sent before the wait is kept and taken here, one a wait, in the
 * order they came. A long wait suspends the task as `sleep` does; what it
 * returned is journaled (docs/durable.md, "Signals").
 */
export async function waitSignal(name, timeoutMs) {
  const payload = hostWaitSignal(name, BigInt(Math.max(0, Math.round(timeoutMs))));
  return payload ?? null;
}

/**
 * Resolves when every task of `ids` — children this task scheduled — has
 * ended, with each one's end, in the order of `ids` (a fan-in): `{ id,
 * status, output, error, succeeded }`, `status` one of "success",
 * "fatal_failure", "dead", "dropped", "cancelled", `output` a `Uint8Array`
 * or `null`, `error` a string or `null`. A wait that does not end within
 * the executor's `suspend_after` suspends the task as `sleep` does, until
 * the last child ends; what it returned is journaled (docs/durable.md, "Fan-in").
 */
export async function waitAll(ids) {
  return hostWaitAll([...ids]).map((end) => ({
    id: end.id,
    status: end.status.replaceAll("-", "_"),
    output: end.output ?? null,
    error: end.error ?? null,
    succeeded: end.status === "success",
  }));
}

/** The component's `handler` export, running `fn` on each task. */
export function handler(fn) {
  return {
    async handle(raw) {
      const task = new Task(raw);
      execution.key = task.idempotencyKey();
      execution.requests = 0;
      try {
        const outcome = await fn(task);
        return outcome === undefined ? success() : outcome;
      } catch (failure) {
        if (failure instanceof LeaseLost) return retry(failure.message);
        return retry(`${failure?.name ?? "Error"}: ${failure?.message ?? failure}`);
      }
    },
  };
}
