// Periodic schedules: the list, a form that shows the next occurrences
// (computed by the server, which also says why an expression is not one)
// before anything is saved, and remove.
import { useEffect, useState } from "preact/hooks";
import { bytesText, call, describe, time, utf8 } from "../api.js";
import { Done, Empty, Failure, Field, LambdaPicker, Placement, fieldOf, useAction, useData } from "../ui.jsx";

const FIELDS = {
  timezone: ["time zone"],
  expression: ["cron expression"],
  payload: ["payload"],
  priority: ["priority"],
  collection: ["collection"],
  key: ["key"],
  lambda: ["lambda"],
};

export function Crons() {
  const { data, error, reload } = useData(() => call("listCrons", {}), []);
  const remove = useAction();
  return (
    <>
      <h1>Cron schedules</h1>
      <NewCron onSaved={reload} />
      <h2>Schedules</h2>
      <Failure error={error ?? remove.error} />
      <Done message={remove.done} />
      {data === undefined ? null : data.crons.length === 0 ? <Empty>No periodic schedule.</Empty> : (
        <table class="crons">
          <thead><tr><th>Lambda</th><th>Expression</th><th>Time zone</th><th>Next</th><th>Payload</th><th>Catch up</th><th></th></tr></thead>
          <tbody>
            {data.crons.map((c) => (
              <tr data-cron={c.id}>
                <td>{c.lambda}{c.collection ? ` / ${c.collection}` : ""}</td>
                <td class="mono">{c.expression}</td>
                <td>{c.timezone}</td>
                <td>{c.nextAtMs === undefined ? <span class="muted">never</span> : time(c.nextAtMs)}</td>
                <td class="clip mono">{bytesText(c.payload)}</td>
                <td>{c.catchUp ? "every missed" : "latest only"}</td>
                <td><button class="danger" disabled={remove.busy} onClick={() => {
                  if (confirm(`Remove the schedule ${c.expression} of ${c.lambda}?`)) {
                    remove.run(() => call("deleteCron", { id: c.id }), "Removed.").then(reload);
                  }
                }}>Remove</button></td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </>
  );
}

function NewCron({ onSaved }) {
  const [form, setForm] = useState({ expression: "*/5 * * * *", timezone: "UTC", payload: "{}", catchUp: false });
  const [preview, setPreview] = useState({ occurrences: [], error: undefined });
  const [errors, setErrors] = useState({});
  const [saved, setSaved] = useState();
  const update = (changes) => {
    setForm({ ...form, ...changes });
    setErrors({});
  };
  // The server's preview, a moment after the expression or zone changes.
  useEffect(() => {
    const timer = setTimeout(async () => {
      try {
        const r = await call("previewCron", {
          expression: form.expression,
          timezone: form.timezone || undefined,
          count: 5,
        });
        setPreview({ occurrences: r.occurrencesMs.map(Number) });
      } catch (error) {
        setPreview({ occurrences: [], error: describe(error) });
      }
    }, 300);
    return () => clearTimeout(timer);
  }, [form.expression, form.timezone]);
  const submit = async (e) => {
    e.preventDefault();
    setErrors({});
    setSaved(undefined);
    try {
      await call("createCron", {
        lambda: form.lambda ?? "",
        expression: form.expression,
        timezone: form.timezone || undefined,
        payload: utf8(form.payload),
        payloadIsJson: true,
        collection: form.collection || undefined,
        key: form.key || undefined,
        priority: form.priority === undefined || form.priority === "" ? undefined : Number(form.priority),
        catchUp: form.catchUp,
      });
      setSaved(`Saved: ${form.lambda} at ${form.expression}.`);
      onSaved();
    } catch (error) {
      const message = describe(error);
      setErrors({ [fieldOf(message, FIELDS)]: message });
    }
  };
  const expressionError = errors.expression ?? preview.error;
  return (
    <form class="card cron-form" onSubmit={submit}>
      <h2>New schedule</h2>
      <div class="grid">
        <Field label="Lambda" name="lambda" error={errors.lambda}>
          <LambdaPicker any={false} value={form.lambda} onInput={(lambda) => update({ lambda })} />
        </Field>
        <Field label="Expression" name="expression" error={expressionError}
          hint="five fields (minute first) or six (seconds first)">
          <input name="expression" class="mono" value={form.expression}
            onInput={(e) => update({ expression: e.currentTarget.value })} />
        </Field>
        <Field label="Time zone" name="timezone" error={errors.timezone}>
          <input name="timezone" value={form.timezone} onInput={(e) => update({ timezone: e.currentTarget.value })} />
        </Field>
        <Placement form={form} errors={errors} update={update} />
        <Field label="After downtime" name="catchUp">
          <select name="catchUp" value={form.catchUp ? "all" : "latest"}
            onInput={(e) => update({ catchUp: e.currentTarget.value === "all" })}>
            <option value="latest">run the latest missed occurrence</option>
            <option value="all">run every missed occurrence</option>
          </select>
        </Field>
      </div>
      <Field label="Payload (JSON)" name="payload" error={errors.payload}>
        <textarea name="payload" class="mono" rows="4" value={form.payload}
          onInput={(e) => update({ payload: e.currentTarget.value })} />
      </Field>
      <div class="preview" aria-label="next occurrences">
        <span class="label">Next occurrences</span>
        {preview.occurrences.length ? (
          <ol>{preview.occurrences.map((at) => <li><time>{time(at)}</time></li>)}</ol>
        ) : <span class="muted">{preview.error ? "none: see the expression" : "…"}</span>}
      </div>
      <Failure error={errors.form} />
      <Done message={saved} />
      <button type="submit">Save schedule</button>
    </form>
  );
}
