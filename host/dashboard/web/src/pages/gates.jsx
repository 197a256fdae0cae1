// Gates: pause a lambda or one collection (its tasks wait in the store),
// drop it (its tasks end as dropped when they come due), or open it again.
import { useState } from "preact/hooks";
import { call, enumName, enumNumber, num, time } from "../api.js";
import { Done, Empty, Failure, Field, LambdaPicker, useAction, useData } from "../ui.jsx";

const VERBS = { paused: "paused", dropped: "dropped", open: "opened" };

export function Gates() {
  const { data, error, reload } = useData(() => call("listGates", {}), [], 3000);
  const [lambda, setLambda] = useState();
  const [collection, setCollection] = useState("");
  const action = useAction();
  const setGate = (target, state) =>
    action.run(
      () => call("setGate", { ...target, state: enumNumber("GateState", state) }),
      (r) => `${target.lambda}${target.collection ? ` / ${target.collection}` : ""} ${VERBS[state]}` +
        (state === "open" ? `: ${num(r.released)} task(s) released.` : "."),
    ).then(reload);
  const target = () => ({ lambda, collection: collection.trim() || undefined });
  return (
    <>
      <h1>Gates</h1>
      <form class="card inline-form" onSubmit={(e) => e.preventDefault()}>
        <Field label="Lambda" name="lambda"><LambdaPicker any={false} value={lambda} onInput={setLambda} /></Field>
        <Field label="Collection" name="collection" hint="empty: the whole lambda">
          <input name="collection" value={collection} onInput={(e) => setCollection(e.currentTarget.value)} />
        </Field>
        <div class="buttons">
          <button disabled={!lambda || action.busy} onClick={() => setGate(target(), "paused")}>Pause</button>
          <button disabled={!lambda || action.busy} onClick={() => setGate(target(), "open")}>Resume</button>
          <button class="danger" disabled={!lambda || action.busy} onClick={() => {
            if (confirm("Dropped tasks end for good when they come due. Drop?")) setGate(target(), "dropped");
          }}>Drop</button>
        </div>
      </form>
      <Failure error={error ?? action.error} />
      <Done message={action.done} />
      <h2>Gates not open</h2>
      {data === undefined ? null : data.gates.length === 0 ? <Empty>Every gate is open.</Empty> : (
        <table class="gates">
          <thead><tr><th>Lambda</th><th>Collection</th><th>State</th><th>Since</th><th></th></tr></thead>
          <tbody>
            {data.gates.map((g) => {
              const state = enumName("GateState", g.state);
              return (
                <tr data-gate={`${g.lambda}/${g.collection ?? ""}`}>
                  <td>{g.lambda}</td>
                  <td>{g.collection ?? <span class="muted">all</span>}</td>
                  <td><span class={`gate g-${state}`}>{state}</span></td>
                  <td>{time(g.updatedAtMs)}</td>
                  <td><button disabled={action.busy}
                    onClick={() => setGate({ lambda: g.lambda, collection: g.collection }, "open")}>Resume</button></td>
                </tr>
              );
            })}
          </tbody>
        </table>
      )}
    </>
  );
}
