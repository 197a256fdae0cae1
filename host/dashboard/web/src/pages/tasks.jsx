// Tasks, filtered and paged by id (keyset paging: the same cost on the
// first page and the ten-thousandth, at millions of tasks). The filters live
// in the address, so a filtered list is a link.
import { call, enumName, enumNames, enumNumber, num, time } from "../api.js";
import { Empty, Failure, LambdaPicker, Status, go, useData } from "../ui.jsx";

const PAGE = 50;

const toMs = (local) => (local ? new Date(local).getTime() : undefined);

export function Tasks({ query }) {
  const filter = Object.fromEntries(query.entries());
  const oldestFirst = filter.order === "oldest";
  const { data, error } = useData(async () => {
    const request = {
      lambda: filter.lambda,
      status: filter.status ? enumNumber("TaskStatus", filter.status) : undefined,
      collection: filter.collection,
      key: filter.key,
      parentId: filter.parent,
      createdFromMs: toMs(filter.from) !== undefined ? BigInt(toMs(filter.from)) : undefined,
      createdBeforeMs: toMs(filter.to) !== undefined ? BigInt(toMs(filter.to)) : undefined,
      newestFirst: !oldestFirst,
      after: filter.after,
      limit: PAGE,
    };
    const list = await call("listTasks", request);
    return { tasks: list.tasks };
  }, [query.toString()]);
  // Counted apart, so the list never waits for a count.
  const counts = useData(async () => filter.lambda
    ? (await call("countTasks", {
      lambda: filter.lambda, collection: filter.collection, key: filter.key, parentId: filter.parent,
    })).counts
    : undefined, [filter.lambda, filter.collection, filter.key, filter.parent]);
  const set = (changes) => go("/tasks", { ...filter, after: undefined, ...changes });
  return (
    <>
      <h1>Tasks</h1>
      <form class="filters" onSubmit={(e) => e.preventDefault()}>
        <LambdaPicker value={filter.lambda} onInput={(lambda) => set({ lambda })} />
        <select name="status" value={filter.status ?? ""} onInput={(e) => set({ status: e.currentTarget.value })}>
          <option value="">any status</option>
          {enumNames("TaskStatus").map((s) => <option value={s}>{s.replace("_", " ")}</option>)}
        </select>
        <input name="collection" placeholder="collection" value={filter.collection ?? ""}
          onChange={(e) => set({ collection: e.currentTarget.value })} />
        <input name="key" placeholder="key" value={filter.key ?? ""}
          onChange={(e) => set({ key: e.currentTarget.value })} />
        <input name="parent" placeholder="parent task id" value={filter.parent ?? ""}
          onChange={(e) => set({ parent: e.currentTarget.value })} />
        <label class="inline">from <input name="from" type="datetime-local" value={filter.from ?? ""}
          onChange={(e) => set({ from: e.currentTarget.value })} /></label>
        <label class="inline">to <input name="to" type="datetime-local" value={filter.to ?? ""}
          onChange={(e) => set({ to: e.currentTarget.value })} /></label>
        <select name="order" value={oldestFirst ? "oldest" : "newest"}
          onInput={(e) => set({ order: e.currentTarget.value === "oldest" ? "oldest" : undefined })}>
          <option value="newest">newest first</option>
          <option value="oldest">oldest first</option>
        </select>
        <a class="button" href="#/tasks">Clear</a>
      </form>
      {counts.data ? (
        <p class="counts">
          {counts.data.map((c) => {
            const status = enumName("TaskStatus", c.status);
            return <a href="#" onClick={(e) => { e.preventDefault(); set({ status }); }}>
              <Status status={status} /> {num(c.count)}
            </a>;
          })}
        </p>
      ) : null}
      <Failure error={error} />
      {data === undefined ? null : data.tasks.length === 0 ? <Empty>No task matches.</Empty> : (
        <>
          <table class="tasks">
            <thead>
              <tr><th>Task</th><th>Lambda</th><th>Collection</th><th>Key</th><th>Status</th><th>Attempt</th>
                <th>Created</th><th>Last error</th></tr>
            </thead>
            <tbody>
              {data.tasks.map((t) => {
                const status = enumName("TaskStatus", t.status);
                return (
                  <tr data-task={t.id}>
                    <td><a class="mono" href={`#/task/${t.id}`}>{t.id}</a></td>
                    <td>{t.lambda}</td>
                    <td>{t.collection}</td>
                    <td class="clip">{t.key ?? ""}</td>
                    <td><Status status={status} />{t.held ? <span class="muted"> held</span> : null}
                      {t.parked ? <span class="muted"> parked</span> : null}</td>
                    <td>{t.attempt}/{t.maxAttempts}</td>
                    <td>{time(t.createdAtMs)}</td>
                    <td class="clip">{t.lastError ?? ""}</td>
                  </tr>
                );
              })}
            </tbody>
          </table>
          <p class="pager">
            {filter.after ? <button onClick={() => history.back()}>Previous page</button> : null}
            {filter.after ? <a class="button" href="#" onClick={(e) => { e.preventDefault(); set({}); }}>First page</a> : null}
            {data.tasks.length === PAGE
              ? <button onClick={() => go("/tasks", { ...filter, after: data.tasks[data.tasks.length - 1].id })}>Next page</button>
              : null}
          </p>
        </>
      )}
    </>
  );
}
