// The page's one door to Waft: a gRPC-web client of the Frontend, built at
// start from the contract the server itself serves (/waft.binpb, the
// descriptor set behind reflection), so the page and the proto cannot
// drift. Every call carries the token the user gave; a refusal comes back
// as the gRPC status the CLI would see.
import { createFileRegistry, fromBinary } from "@bufbuild/protobuf";
import { FileDescriptorSetSchema } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createGrpcWebTransport } from "@connectrpc/connect-web";

const TOKEN_KEY = "waft.token";

// The token is kept by the tab alone (sessionStorage): it goes when the tab
// closes, is not shared with the browser's other tabs, and is never
// written where it outlives the session.
export const token = {
  get: () => globalThis.sessionStorage?.getItem(TOKEN_KEY),
  set: (value) => sessionStorage.setItem(TOKEN_KEY, value),
  forget: () => sessionStorage.removeItem(TOKEN_KEY),
};

let registry;
let frontend;

/** Loads the contract and makes the client; once, before the first page
 * (or a script's first call, with the server's address). */
export async function connect(baseUrl = location.origin) {
  const response = await fetch(`${baseUrl}/waft.binpb`);
  if (!response.ok) throw new Error(`cannot load the API's contract: HTTP ${response.status}`);
  const bytes = new Uint8Array(await response.arrayBuffer());
  registry = createFileRegistry(fromBinary(FileDescriptorSetSchema, bytes));
  const service = registry.getService("waft.v1.Frontend");
  const bearer = (next) => async (request) => {
    const secret = token.get();
    if (secret) request.header.set("authorization", `Bearer ${secret}`);
    return next(request);
  };
  const transport = createGrpcWebTransport({
    baseUrl,
    interceptors: [bearer],
  });
  frontend = createClient(service, transport);
}

/** Listeners told when a call needs a token (UNAUTHENTICATED). */
const onUnauthenticated = new Set();
export const whenUnauthenticated = (listener) => {
  onUnauthenticated.add(listener);
  return () => onUnauthenticated.delete(listener);
};

/** Calls a Frontend method by its proto name in lower camel case
 * (`listTasks`, `setGate`...); a refusal becomes an error whose message is
 * the server's. */
export async function call(method, request = {}) {
  try {
    return await frontend[method](request);
  } catch (error) {
    const refusal = ConnectError.from(error);
    if (refusal.code === Code.Unauthenticated) onUnauthenticated.forEach((f) => f());
    throw refusal;
  }
}

/** How a refusal reads: `permission denied: the server's message`. */
export function describe(error) {
  const refusal = ConnectError.from(error);
  const code = Code[refusal.code] ?? "unknown";
  const words = code.replace(/([a-z])([A-Z])/g, "$1 $2").toLowerCase();
  return `${words}: ${refusal.rawMessage}`;
}

/**
 * The task states that end a task: no trigger is left, so the page stops
 * offering cancel. The state table's set of that name (waft_core::machine::ENDED),
 * in its order; a test of the dashboard crate holds it to it.
 */
export const ENDED = ["success", "fatal_failure", "dead", "dropped", "cancelled"];

/** The short name of an enum value: TASK_STATUS_RETRIABLE_FAILURE → retriable_failure. */
export function enumName(enumType, number) {
  const desc = registry.getEnum(`waft.v1.${enumType}`);
  const value = desc.values.find((v) => v.number === number);
  if (!value) return `unknown (${number})`;
  const prefix = `${enumType.replace(/([a-z])([A-Z])/g, "$1_$2").toUpperCase()}_`;
  return value.name.slice(prefix.length).toLowerCase();
}

/** The number of an enum value by its short name. */
export function enumNumber(enumType, name) {
  const desc = registry.getEnum(`waft.v1.${enumType}`);
  return desc.values.find((v) => enumName(enumType, v.number) === name)?.number;
}

/** Every short name of an enum but UNSPECIFIED. */
export function enumNames(enumType) {
  const desc = registry.getEnum(`waft.v1.${enumType}`);
  return desc.values.filter((v) => v.number !== 0).map((v) => enumName(enumType, v.number));
}

export const num = (value) => (value === undefined || value === null ? undefined : Number(value));

export function time(ms) {
  if (ms === undefined || ms === null) return "";
  return new Date(Number(ms)).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
}

export function age(ms) {
  const s = Math.max(0, Math.round(Number(ms) / 1000));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${s % 60}s`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
  return `${Math.floor(s / 86400)}d ${Math.floor((s % 86400) / 3600)}h`;
}

/** Bytes as text: pretty JSON when they are JSON, UTF-8 when they decode,
 * hex otherwise. */
export function bytesText(bytes) {
  if (!bytes || bytes.length === 0) return "";
  let text;
  try {
    text = new TextDecoder("utf-8", { fatal: true }).decode(bytes);
  } catch {
    return `hex: ${[...bytes].map((b) => b.toString(16).padStart(2, "0")).join("")}`;
  }
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    return text;
  }
}

export const utf8 = (text) => new TextEncoder().encode(text);
