// One task whole: payload and output, its timestamps as a timeline, every
// ended attempt with its outcome, error and log, its journal (the host calls
// its executions made, each made live by one attempt and replayed by later
// ones), its children as a tree, cancel (or redrive, when dead), and a
// signal to send it (an approval) while it has not ended.
import { useState } from "preact/hooks";
import { ENDED, bytesText, call, enumName, num, time, utf8 } from "../api.js";
import { Done, Empty, Failure, Field, Status, go, useAction, useData } from "../ui.jsx";

const TIMELINE = [
  ["createdAtMs", "created"],
  ["scheduledAtMs", "scheduled for"],
  ["enqueuedAtMs", "enqueued"],
  ["claimedAtMs", "claimed"],
  ["heartbeatAtMs", "last heartbeat"],
  ["finishedAtMs", "finished"],
  ["nextTriggerAtMs", "next look"],
];

export function TaskPage({ id, query }) {
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
        {task.parked ? (task.awaitsTurn
          ? "parked: waits for its key's turn (the lambda is fair between keys) · "
          : "parked: waits for a free place for its key (the lambda's concurrency per key) · ") : ""}
        {!ended && task.paced ? "paced: waits for its slot of the lambda's scheduling quota · " : ""}
        {!ended && task.keyPaced && !task.paced ? "paced: waits for its slot of its key's rate (the lambda's rate per key) · " : ""}
        {status === "new" && task.debounced && !task.paced && !task.keyPaced ? "debounced: waits for its window; its key's debounced tasks collapse into it · " : ""}
        <a href={`#/lambda/${encodeURIComponent(task.lambda)}`}>{task.lambda}</a>
        {task.version !== undefined ? ` v${task.version}` : ""} · collection {task.collection} ·
        {task.key !== undefined ? <> key <a href={`#/tasks?lambda=${encodeURIComponent(task.lambda)}&key=${encodeURIComponent(task.key)}`}>{task.key}</a> ·</> : null}
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
      {task.waitingForSignal !== undefined
        ? <p class="waiting">Waiting for signal <b class="mono">{task.waitingForSignal}</b>
          {" "}(or its time: see “next look”).</p>
        : null}
      {task.waitingForChildren
        ? <p class="waiting">Waiting for its children to end (see “Children” below).</p>
        : null}
      {!ended ? <SignalForm id={id} name={task.waitingForSignal} action={action} sent={reload} /> : null}
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
            {a.replayed ? ` · ${a.replayed} journal entries replayed` : ""}
            {a.error ? <> · <span class="clip">{a.error}</span></> : null}
          </summary>
          {a.error ? <><h3>Error</h3><pre class="error-text">{a.error}</pre></> : null}
          <h3>Log</h3>
          <pre class="log">{a.log || "(nothing logged)"}</pre>
        </details>
      ))}
      {task.log && !ended ? <><h2>Log of the running attempt</h2><pre class="log">{task.log}</pre></> : null}
      <h2>Journal</h2>
      <Journal id={id} attempts={attempts} ended={ended} from={journalFrom(query)} />
      <h2>Children</h2>
      <Children parent={id} depth={0} />
    </>
  );
}

/** Sends the task a signal (`waft task signal ID NAME --payload JSON`): the
 * name it waits for, when it waits, is filled in. The answer is the page's
 * `action`'s, shown above the form: a task the signal wakes may end before
 * the page reloads it, and the form goes with its end. */
function SignalForm({ id, name, action, sent }) {
  const [form, setForm] = useState({ name: undefined, payload: "" });
  const signalName = form.name ?? name ?? "";
  const submit = (e) => {
    e.preventDefault();
    action.run(
      () => call("signalTask", { id, name: signalName, payload: utf8(form.payload) }),
      (answer) => answer.woke ? `Signal ${signalName} sent: the task resumes.`
        : `Signal ${signalName} sent: kept until the task waits for it.`,
    ).then(sent);
  };
  return (
    <form class="card signal-form" onSubmit={submit}>
      <div class="grid">
        <Field label="Signal" name="signal">
          <input name="signal" value={signalName} placeholder="approved"
            onInput={(e) => setForm({ ...form, name: e.currentTarget.value })} />
        </Field>
        <Field label="Payload" name="signal-payload">
          <input name="signal-payload" class="mono" value={form.payload} placeholder='{"by": "Ada"}'
            onInput={(e) => setForm({ ...form, payload: e.currentTarget.value })} />
        </Field>
      </div>
      <p class="actions"><button type="submit" disabled={action.busy || !signalName}>Send signal</button></p>
    </form>
  );
}

/** Entries a page of the journal shows; `?from=N` starts one at entry N. */
const JOURNAL_ROWS = 200;

/** The first entry the route asks for: `#/task/ID?from=N`. */
function journalFrom(query) {
  const from = Number(query?.get("from") ?? 0);
  return Number.isSafeInteger(from) && from > 0 ? from : 0;
}

/** The attempts that replayed entry `seq`: those answered from the journal
 * beyond it. */
const replayedBy = (seq, attempts) =>
  attempts.filter((a) => (a.replayed ?? 0) > seq).map((a) => a.attempt);

/** A call's duration: 850µs, 12.3ms, 4.56s. */
function took(us) {
  const micros = Number(us ?? 0);
  if (micros < 1000) return `${micros}µs`;
  if (micros < 1_000_000) return `${(micros / 1000).toFixed(1)}ms`;
  return `${(micros / 1_000_000).toFixed(2)}s`;
}

/** A task's journal, a page at a time: every host call its executions made,
 * in order, with the attempt that made it live and those that replayed it.
 * Read again while the task runs; the answers never reach the page. */
function Journal({ id, attempts, ended, from }) {
  const { data, error } = useData(
    () => call("getJournal", { id, from, limit: JOURNAL_ROWS }),
    [id, from, attempts.length],
    ended ? undefined : 3000,
  );
  if (error) return <Failure error={error} />;
  if (!data) return null;
  const entries = data.entries;
  const page = (start) => go(`/task/${encodeURIComponent(id)}`, { from: start || undefined });
  if (entries.length === 0 && from === 0) return <Empty>No journal: its executions made no host call to record.</Empty>;
  return (
    <>
      <table class="journal">
        <thead>
          <tr><th class="num">#</th><th>call</th><th>summary</th><th>live / replayed</th><th>at</th><th class="num">took</th></tr>
        </thead>
        <tbody>
          {entries.map((e) => {
            const replayed = replayedBy(e.seq, attempts);
            return (
              <tr data-seq={e.seq} class={e.outside ? "outside" : ""}>
                <td class="num">{e.seq}</td>
                <td class="mono">{e.call}{e.outside ? <span class="muted" title="reached outside the sandbox: written before the lambda saw its answer"> ↗</span> : null}</td>
                <td class="clip" title={e.summary}>{e.summary}</td>
                <td class="used">
                  live #{e.attempt}
                  {replayed.length ? `, replayed ${replayed.map((a) => `#${a}`).join(" ")}` : ""}
                </td>
                <td>{time(num(e.atMs))}</td>
                <td class="num">{took(e.tookUs)}</td>
              </tr>
            );
          })}
        </tbody>
      </table>
      {from > 0 || data.next !== undefined
        ? (
          <p class="pager journal-pager">
            <span class="muted">entries {from}–{from + entries.length - 1} · </span>
            {from > 0 ? <button onClick={() => page(Math.max(0, from - JOURNAL_ROWS))}>Previous entries</button> : null}
            {data.next !== undefined ? <button onClick={() => page(data.next)}>Next entries</button> : null}
          </p>
        )
        : null}
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
