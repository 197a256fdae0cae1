// One task whole: payload and output, its timestamps as a timeline, every
// ended attempt with its outcome, error and log, its children as a tree,
// and cancel (or redrive, when dead).
import { useState } from "preact/hooks";
import { ENDED, bytesText, call, enumName, num, time } from "../api.js";
import { Done, Empty, Failure, Status, useAction, useData } from "../ui.jsx";

const TIMELINE = [
  ["createdAtMs", "created"],
  ["scheduledAtMs", "scheduled for"],
  ["enqueuedAtMs", "enqueued"],
  ["claimedAtMs", "claimed"],
  ["heartbeatAtMs", "last heartbeat"],
  ["finishedAtMs", "finished"],
  ["nextTriggerAtMs", "next look"],
];

export function TaskPage({ id }) {
  const { data, error, reload } = useData(async () => {
    const [{ task }, { attempts }] = await Promise.all([
      call("getTask", { id }),
      call("listAttempts", { id }),
    ]);
    return { task, attempts };
  }, [id], 3000);
  const action = useAction();
  if (!data) return <><h1>Task <span class="mono">{id}</span></h1><Failure error={error} /></>;
  const { task, attempts } = data;
  const status = enumName("TaskStatus", task.status);
  const ended = ENDED.includes(status);
  const moments = TIMELINE.filter(([field]) => task[field] !== undefined)
    .map(([field, label]) => ({ label, at: num(task[field]) }))
    .sort((a, b) => a.at - b.at);
  return (
    <>
      <h1>Task <span class="mono">{task.id}</span></h1>
      <p class="sub">
        <Status status={status} /> {task.held ? "held by a paused gate · " : ""}
        <a href={`#/lambda/${encodeURIComponent(task.lambda)}`}>{task.lambda}</a>
        {task.version !== undefined ? ` v${task.version}` : ""} · collection {task.collection} ·
        priority {task.priority} · attempt {task.attempt} of {task.maxAttempts}
        {task.parentId ? <> · parent <a class="mono" href={`#/task/${task.parentId}`}>{task.parentId}</a></> : null}
      </p>
      <p class="actions">
        {!ended ? <button class="danger" disabled={action.busy}
          onClick={() => action.run(() => call("cancelTask", { id }), "Cancelled.").then(reload)}>Cancel</button> : null}
        {status === "dead" ? <button disabled={action.busy}
          onClick={() => action.run(() => call("redriveDead", { ids: [id] }), "Redriven onto the current version.").then(reload)}>Redrive</button> : null}
        <a class="button" href={`#/schedule?lambda=${encodeURIComponent(task.lambda)}`}>Schedule another</a>
      </p>
      <Failure error={error ?? action.error} />
      <Done message={action.done} />
      {task.progress ? <p>Progress: {task.progress}</p> : null}
      {task.lastError ? <><h2>Last error</h2><pre class="error-text">{task.lastError}</pre></> : null}
      <div class="columns">
        <section>
          <h2>Payload</h2>
          <pre class="payload">{bytesText(task.payload) || <span class="muted">(empty)</span>}</pre>
        </section>
        <section>
          <h2>Output</h2>
          <pre class="output">{task.output ? bytesText(task.output) || "(empty)" : <span class="muted">none yet</span>}</pre>
        </section>
      </div>
      <h2>Timeline</h2>
      <ol class="timeline">
        {moments.map((m) => <li><time>{time(m.at)}</time> {m.label}</li>)}
      </ol>
      <h2>Attempts</h2>
      {attempts.length === 0 ? <Empty>No attempt has ended yet.</Empty> : attempts.map((a) => (
        <details class="attempt" open={a === attempts[attempts.length - 1]}>
          <summary>
            Attempt {a.attempt} · <span class={`outcome o-${enumName("AttemptOutcome", a.outcome)}`}>
              {enumName("AttemptOutcome", a.outcome)}</span>
            {" · "}{a.startedAtMs !== undefined ? `${time(a.startedAtMs)} → ` : ""}{time(a.endedAtMs)}
            {a.error ? <> · <span class="clip">{a.error}</span></> : null}
          </summary>
          {a.error ? <><h3>Error</h3><pre class="error-text">{a.error}</pre></> : null}
          <h3>Log</h3>
          <pre class="log">{a.log || "(nothing logged)"}</pre>
        </details>
      ))}
      {task.log && !ended ? <><h2>Log of the running attempt</h2><pre class="log">{task.log}</pre></> : null}
      <h2>Children</h2>
      <Children parent={id} depth={0} />
    </>
  );
}

const CHILDREN = 100;

/** A task's children, each with its own children folded until opened. */
function Children({ parent, depth }) {
  const { data, error } = useData(
    () => call("listTasks", { parentId: parent, limit: CHILDREN }),
    [parent],
  );
  if (error) return <Failure error={error} />;
  if (!data) return null;
  if (data.tasks.length === 0) return depth === 0 ? <Empty>No children.</Empty> : <span class="muted"> no children</span>;
  return (
    <ul class="tree">
      {data.tasks.map((t) => <Child task={t} depth={depth} />)}
      {data.tasks.length === CHILDREN
        ? <li><a href={`#/tasks?parent=${parent}`}>All children…</a></li> : null}
    </ul>
  );
}

function Child({ task, depth }) {
  const [open, setOpen] = useState(false);
  return (
    <li>
      <button class="link" aria-label="children" onClick={() => setOpen(!open)}>{open ? "▾" : "▸"}</button>
      <a class="mono" href={`#/task/${task.id}`}>{task.id}</a> {task.lambda}{" "}
      <Status status={enumName("TaskStatus", task.status)} />
      {open ? <Children parent={task.id} depth={depth + 1} /> : null}
    </li>
  );
}
