// Every lambda at a glance, refreshed every two seconds: its queue depth per
// priority, what runs, how long the oldest ready task has waited, the last
// hour's successes and failures, and its gate — with pause and resume;
// below, the history of every lambda's tasks as charts.
import { age, call, enumName, enumNumber, num } from "../api.js";
import { Empty, Failure, useAction, useData } from "../ui.jsx";
import { History } from "../charts.jsx";

export function Overview() {
  const { data, error, reload } = useData(async () => {
    const [lambdas, stats, gates] = await Promise.all([
      call("listLambdas", {}),
      call("lambdaStats", {}),
      call("listGates", {}),
    ]);
    return { lambdas: lambdas.lambdas, stats: stats, gates: gates.gates };
  }, [], 2000);
  const action = useAction();
  if (!data) return <><h1>Overview</h1><Failure error={error} /></>;
  const now = num(data.stats.nowMs);
  const byName = new Map(data.stats.lambdas.map((s) => [s.lambda, s]));
  const gate = (name) => data.gates.find((g) => g.lambda === name && g.collection === undefined);
  const collectionGates = (name) => data.gates.filter((g) => g.lambda === name && g.collection !== undefined);
  const setGate = (lambda, state) =>
    action.run(
      () => call("setGate", { lambda, state: enumNumber("GateState", state) }),
      `${lambda}: ${state === "open" ? "resumed" : state}`,
    ).then(reload);
  return (
    <>
      <h1>Overview</h1>
      <p class="sub">Live: refreshed every 2 s. Counts are tasks now; the last hour counts executions.</p>
      <Failure error={error ?? action.error} />
      {data.lambdas.length === 0 ? <Empty>No lambda is deployed yet.</Empty> : (
        <table class="overview">
          <thead>
            <tr>
              <th>Lambda</th><th>Gate</th><th>Ready by priority</th><th>Oldest ready</th>
              <th>Waiting</th><th>Suspended</th><th>Held</th><th>Parked</th><th>Paced</th><th>Running</th><th>Succeeded 1h</th>
              <th>Failed 1h</th><th>Dead</th><th></th>
            </tr>
          </thead>
          <tbody>
            {data.lambdas.map((lambda) => {
              const s = byName.get(lambda.name) ?? { ready: [] };
              const g = gate(lambda.name);
              const state = g ? enumName("GateState", g.state) : "open";
              const ready = s.ready.reduce((n, d) => n + num(d.count), 0);
              const oldest = s.ready.length
                ? Math.min(...s.ready.map((d) => num(d.oldestDueMs))) : undefined;
              const partial = collectionGates(lambda.name);
              return (
                <tr data-lambda={lambda.name}>
                  <td><a href={`#/lambda/${encodeURIComponent(lambda.name)}`}>{lambda.name}</a>
                    <span class="muted"> v{lambda.version}</span></td>
                  <td>
                    <span class={`gate g-${state}`}>{state}</span>
                    {partial.length ? <span class="muted"> +{partial.length} collection{partial.length > 1 ? "s" : ""}</span> : null}
                  </td>
                  <td class="depth">
                    {ready === 0 ? <span class="muted">0</span> : s.ready.map((d) => (
                      <span class="chip" title={`priority ${d.priority}`}>p{d.priority}: {num(d.count)}</span>
                    ))}
                  </td>
                  <td>{oldest === undefined ? "" : age(now - oldest)}</td>
                  <td>{num(s.waiting) ?? 0}</td>
                  <td>{num(s.suspended) ?? 0}
                    {num(s.waitingForSignal)
                      ? <span class="muted" title="waiting for a signal; the rest are asleep">
                        {" "}({num(s.waitingForSignal)} on signals)</span>
                      : null}
                    {num(s.waitingForChildren)
                      ? <span class="muted" title="waiting for their children to end">
                        {" "}({num(s.waitingForChildren)} on children)</span>
                      : null}</td>
                  <td>{num(s.held) ?? 0}</td>
                  <td title="waiting for a free place for their key (the lambda's concurrency per key)">
                    {num(s.parked) ?? 0}</td>
                  <td title="waiting for a slot of the lambda's quota or of their key's rate">
                    {num(s.paced) ?? 0}</td>
                  <td>{num(s.running) ?? 0}</td>
                  <td class="ok">{num(s.succeeded) ?? 0}</td>
                  <td class={num(s.failed) ? "bad" : ""}>{num(s.failed) ?? 0}</td>
                  <td>{num(s.dead) ? <a href={`#/dead?lambda=${encodeURIComponent(lambda.name)}`}>{num(s.dead)}</a> : 0}</td>
                  <td><div class="actions">
                    {state === "open"
                      ? <button onClick={() => setGate(lambda.name, "paused")} disabled={action.busy}>Pause</button>
                      : <button onClick={() => setGate(lambda.name, "open")} disabled={action.busy}>Resume</button>}
                    <a class="button" href={`#/tasks?lambda=${encodeURIComponent(lambda.name)}`}>Tasks</a>
                  </div></td>
                </tr>
              );
            })}
          </tbody>
        </table>
      )}
      <History />
    </>
  );
}
