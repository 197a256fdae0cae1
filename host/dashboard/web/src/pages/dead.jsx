// Dead letters: tasks that used up their attempts, by lambda and collection,
// with the last error. Redrive one, a selection, or every one matching the
// filter, onto the current version or a chosen one.
import { useState } from "preact/hooks";
import { call, enumNumber, time } from "../api.js";
import { Done, Empty, Failure, LambdaPicker, go, useAction, useData } from "../ui.jsx";

const PAGE = 100;

export function DeadLetters({ query }) {
  const filter = Object.fromEntries(query.entries());
  const [selected, setSelected] = useState(new Set());
  const [version, setVersion] = useState("");
  const action = useAction();
  const { data, error, reload } = useData(async () => {
    const [list, versions] = await Promise.all([
      call("listTasks", {
        status: enumNumber("TaskStatus", "dead"),
        lambda: filter.lambda,
        collection: filter.collection,
        after: filter.after,
        limit: PAGE,
      }),
      filter.lambda ? call("listVersions", { name: filter.lambda }) : Promise.resolve({ versions: [] }),
    ]);
    return { tasks: list.tasks, versions: versions.versions };
  }, [query.toString()]);
  const set = (changes) => {
    setSelected(new Set());
    go("/dead", { ...filter, after: undefined, ...changes });
  };
  const pinned = version === "" ? undefined : Number(version);
  const redrive = (request, what) =>
    action.run(
      () => call("redriveDead", { ...request, version: pinned }),
      (r) => `${Number(r.redriven)} ${what} redriven onto ${pinned === undefined ? "the current version" : `version ${pinned}`}.`,
    ).then(() => { setSelected(new Set()); reload(); });
  const toggle = (id) => {
    const next = new Set(selected);
    if (next.has(id)) next.delete(id); else next.add(id);
    setSelected(next);
  };
  const tasks = data?.tasks ?? [];
  return (
    <>
      <h1>Dead letters</h1>
      <form class="filters" onSubmit={(e) => e.preventDefault()}>
        <LambdaPicker value={filter.lambda} onInput={(lambda) => set({ lambda })} />
        <input name="collection" placeholder="collection" value={filter.collection ?? ""}
          onChange={(e) => set({ collection: e.currentTarget.value })} />
        <label class="inline">onto
          <select name="version" value={version} onInput={(e) => setVersion(e.currentTarget.value)}>
            <option value="">the current version</option>
            {(data?.versions ?? []).map((v) => <option value={v.version}>version {v.version}</option>)}
          </select>
        </label>
        <button type="button" disabled={selected.size === 0 || action.busy}
          onClick={() => redrive({ ids: [...selected] }, "selected")}>
          Redrive selected ({selected.size})
        </button>
        <button type="button" disabled={!filter.lambda || action.busy}
          title={filter.lambda ? "" : "Choose a lambda first"}
          onClick={() => redrive({ lambda: filter.lambda, collection: filter.collection }, "matching the filter")}>
          Redrive all matching
        </button>
      </form>
      {!filter.lambda ? <p class="sub">Choose a lambda to redrive every dead task matching the filter, or to pick a version.</p> : null}
      <Failure error={error ?? action.error} />
      <Done message={action.done} />
      {data === undefined ? null : tasks.length === 0 ? <Empty>No dead letters match.</Empty> : (
        <>
          <table class="dead">
            <thead>
              <tr>
                <th><input type="checkbox" aria-label="select all on this page"
                  checked={tasks.every((t) => selected.has(t.id))}
                  onInput={(e) => setSelected(e.currentTarget.checked ? new Set(tasks.map((t) => t.id)) : new Set())} /></th>
                <th>Task</th><th>Lambda</th><th>Collection</th><th>Attempts</th><th>Died</th><th>Last error</th><th></th>
              </tr>
            </thead>
            <tbody>
              {tasks.map((t) => (
                <tr data-task={t.id}>
                  <td><input type="checkbox" checked={selected.has(t.id)} onInput={() => toggle(t.id)} aria-label={`select ${t.id}`} /></td>
                  <td><a class="mono" href={`#/task/${t.id}`}>{t.id}</a></td>
                  <td>{t.lambda}</td>
                  <td>{t.collection}</td>
                  <td>{t.attempt}/{t.maxAttempts}</td>
                  <td>{time(t.finishedAtMs)}</td>
                  <td class="clip error-text">{t.lastError ?? ""}</td>
                  <td><button disabled={action.busy} onClick={() => redrive({ ids: [t.id] }, "task")}>Redrive</button></td>
                </tr>
              ))}
            </tbody>
          </table>
          {tasks.length === PAGE ? (
            <p class="pager"><button onClick={() => go("/dead", { ...filter, after: tasks[tasks.length - 1].id })}>Next page</button></p>
          ) : null}
        </>
      )}
    </>
  );
}
