// Lambdas: every one at its current version, and one lambda's versions with
// their limits and configuration (variables; secrets by name only — their
// values never leave the store), with rollback and deletion, and the
// history of its tasks as charts.
import { call, enumName, num, time } from "../api.js";
import { useState } from "preact/hooks";
import { Done, Empty, Failure, useAction, useData } from "../ui.jsx";
import { History } from "../charts.jsx";

const bytes = (n) => {
  const v = num(n);
  if (v === undefined) return "";
  for (const [unit, size] of [["GiB", 1 << 30], ["MiB", 1 << 20], ["KiB", 1 << 10]]) {
    if (v >= size && v % size === 0) return `${v / size} ${unit}`;
  }
  return `${v} B`;
};
const ms = (n) => (num(n) === undefined ? "" : `${num(n)} ms`);
// A retention: the largest unit that divides it.
const kept = (n) => {
  const v = num(n);
  if (v === undefined) return "forever";
  for (const [unit, size] of [["d", 86_400_000], ["h", 3_600_000], ["min", 60_000], ["s", 1000]]) {
    if (v % size === 0) return `${v / size} ${unit}`;
  }
  return `${v} ms`;
};

export function Lambdas() {
  const { data, error } = useData(() => call("listLambdas", {}), []);
  return (
    <>
      <h1>Lambdas</h1>
      <Failure error={error} />
      {data === undefined ? null : data.lambdas.length === 0 ? <Empty>No lambda is deployed yet.</Empty> : (
        <table class="lambdas">
          <thead><tr><th>Lambda</th><th>Version</th><th>Deployed</th><th>Digest</th><th>Memory</th><th>Timeout</th><th>Attempts</th><th>Concurrency</th></tr></thead>
          <tbody>
            {data.lambdas.map((l) => (
              <tr data-lambda={l.name}>
                <td><a href={`#/lambda/${encodeURIComponent(l.name)}`}>{l.name}</a></td>
                <td>{l.version}</td>
                <td>{time(l.createdAtMs)}</td>
                <td class="mono">{l.digest.slice(0, 12)}</td>
                <td>{bytes(l.config.maxMemoryBytes)}</td>
                <td>{ms(l.config.timeoutMs)}</td>
                <td>{l.config.maxAttempts}</td>
                <td>{l.config.concurrency || "unbounded"}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </>
  );
}

export function LambdaPage({ name }) {
  const { data, error, reload } = useData(async () => {
    const [{ lambda }, { versions }, secrets] = await Promise.all([
      call("getLambda", { name }),
      call("listVersions", { name }),
      // Names only; refused to a token that may not manage the lambda.
      call("listSecrets", { lambda: name }).catch(() => undefined),
    ]);
    return { current: lambda, versions, secrets: secrets?.secrets };
  }, [name]);
  const rollback = useAction();
  const removal = useAction();
  const [dropTasks, setDropTasks] = useState(false);
  if (!data) return <><h1>{name}</h1><Failure error={error} /></>;
  return (
    <>
      <h1>{name} <span class="muted">v{data.current.version}</span></h1>
      <p class="actions">
        <a class="button" href={`#/tasks?lambda=${encodeURIComponent(name)}`}>Tasks</a>
        <a class="button" href={`#/dead?lambda=${encodeURIComponent(name)}`}>Dead letters</a>
        <a class="button" href={`#/schedule?lambda=${encodeURIComponent(name)}`}>Schedule</a>
      </p>
      <Failure error={rollback.error} />
      <Done message={rollback.done} />
      <Failure error={removal.error} />
      <History lambda={name} />
      <h2>Secrets</h2>
      {data.secrets === undefined ? <p class="muted">Not shown to this token.</p>
        : data.secrets.length === 0 ? <Empty>None.</Empty>
        : <p>{data.secrets.map((s) => <span class="chip mono">{s.name}</span>)} <span class="muted">(values never leave the store)</span></p>}
      <h2>Versions</h2>
      {[...data.versions].reverse().map((v) => (
        <section class="card version" data-version={v.version}>
          <h3>
            Version {v.version} {v.version === data.current.version ? <span class="chip">current</span> : null}
            <span class="muted"> · {time(v.createdAtMs)} · <span class="mono">{v.digest.slice(0, 16)}</span></span>
          </h3>
          {v.version !== data.current.version ? (
            <button disabled={rollback.busy} onClick={() => {
              if (confirm(`Make version ${v.version} current again (as a new version)?`)) {
                rollback.run(() => call("rollbackLambda", { name, version: v.version }),
                  (r) => `Rolled back: version ${r.lambda.version} runs version ${v.version}'s component and configuration.`).then(reload);
              }
            }}>Roll back to this version</button>
          ) : null}
          <Config config={v.config} />
        </section>
      ))}
      <h2>Delete</h2>
      <p class="muted">Its versions, secrets, periodic schedules, gates, queues and every task of it go
        for good. Refused while tasks of it may still run, unless they go too.</p>
      <p class="actions">
        <label><input type="checkbox" name="drop-tasks" checked={dropTasks}
          onChange={(e) => setDropTasks(e.currentTarget.checked)} /> with its tasks that may still run</label>
        <button class="danger" disabled={removal.busy} onClick={() => {
          if (confirm(`Delete lambda ${name}${dropTasks ? " and every task of it" : ""}? This cannot be undone.`)) {
            removal.run(() => call("deleteLambda", { name, dropTasks }), () => "")
              .then((r) => { if (r) location.hash = "#/lambdas"; });
          }
        }}>Delete lambda</button>
      </p>
    </>
  );
}

function Config({ config }) {
  const limits = config.outboundLimits ?? {};
  const rows = [
    ["memory", bytes(config.maxMemoryBytes)],
    ["timeout", ms(config.timeoutMs)],
    ["fuel", num(config.fuel) ? num(config.fuel).toLocaleString() : "unmetered"],
    ["output", bytes(config.maxOutputBytes)],
    ["log", bytes(config.maxLogBytes)],
    ["payload", bytes(config.maxPayloadBytes)],
    ["attempts", config.maxAttempts],
    ["backoff", `${ms(config.backoffBaseMs)} × ${config.backoffFactor} up to ${ms(config.backoffMaxMs)}`],
    ["priorities", `${config.priorities} (default ${config.defaultPriority})`],
    ["concurrency", config.concurrency || "unbounded"],
    ["quota", config.quotaPerSec ? `${config.quotaPerSec}/s` : "none"],
    ["children of", config.allowedChildren.length ? config.allowedChildren.join(", ") : "its own lambda only"],
    ["outbound", config.allowOutbound.length ? config.allowOutbound.join(", ") : "no network"],
    ["on divergence", config.onDivergence ? enumName("OnDivergence", config.onDivergence) : "fail"],
    ["retention", (config.retention ?? []).length
      ? config.retention.map((r) => `${r.end} ${kept(r.keepMs)}`).join(", ")
      : "the installation's"],
    ["outbound limits", config.allowOutbound.length
      ? `${limits.maxRequests ?? "?"} requests, ${limits.maxConnections ?? "?"} connections, ${bytes(limits.maxResponseBytes)} a response`
      : ""],
  ];
  const env = Object.entries(config.env ?? {});
  return (
    <div class="columns">
      <dl class="config">
        {rows.filter(([, v]) => v !== "" && v !== undefined).map(([k, v]) => <><dt>{k}</dt><dd>{String(v)}</dd></>)}
      </dl>
      <div>
        <h4>Configuration variables</h4>
        {env.length === 0 ? <p class="muted">None.</p> : (
          <dl class="config">{env.map(([k, v]) => <><dt class="mono">{k}</dt><dd class="mono">{v}</dd></>)}</dl>
        )}
      </div>
    </div>
  );
}
