// Schedules one task. The payload is declared JSON, so the Frontend checks
// it and a refusal appears next to the field that caused it, in the
// server's words; the editor also says while typing whether it parses.
import { useState } from "preact/hooks";
import { call, describe, utf8 } from "../api.js";
import { Failure, Field, LambdaPicker, Placement, fieldOf } from "../ui.jsx";

const FIELDS = {
  payload: ["payload"],
  priority: ["priority"],
  collection: ["collection"],
  idempotency: ["idempotency"],
  key: ["key"],
  delay: ["delay", "run_at"],
  lambda: ["lambda"],
};

function parses(text) {
  try {
    JSON.parse(text);
    return undefined;
  } catch (error) {
    return error.message;
  }
}

export function Schedule({ query }) {
  const [form, setForm] = useState({ lambda: query.get("lambda") ?? undefined, payload: "{}" });
  const [errors, setErrors] = useState({});
  const [scheduled, setScheduled] = useState();
  const update = (changes) => {
    setForm({ ...form, ...changes });
    setErrors({});
  };
  const submit = async (e) => {
    e.preventDefault();
    setErrors({});
    setScheduled(undefined);
    const delay = form.delay ? Math.round(Number(form.delay) * 1000) : undefined;
    try {
      const answer = await call("schedule", {
        task: {
          lambda: form.lambda ?? "",
          payload: utf8(form.payload),
          payloadIsJson: true,
          collection: form.collection || undefined,
          priority: form.priority ? Number(form.priority) : undefined,
          when: delay ? { case: "delayMs", value: BigInt(delay) } : undefined,
          idempotencyKey: form.idempotencyKey || undefined,
          key: form.key || undefined,
        },
      });
      setScheduled(answer);
    } catch (error) {
      const message = describe(error);
      setErrors({ [fieldOf(message, FIELDS)]: message });
    }
  };
  const local = parses(form.payload);
  return (
    <>
      <h1>Schedule a task</h1>
      <form class="card schedule-form" onSubmit={submit}>
        <div class="grid">
          <Field label="Lambda" name="lambda" error={errors.lambda}>
            <LambdaPicker any={false} value={form.lambda} onInput={(lambda) => update({ lambda })} />
          </Field>
          <Placement form={form} errors={errors} update={update} />
          <Field label="Delay (seconds)" name="delay" error={errors.delay}>
            <input name="delay" type="number" min="0" step="any" placeholder="now" value={form.delay ?? ""}
              onInput={(e) => update({ delay: e.currentTarget.value })} />
          </Field>
          <Field label="Idempotency key" name="idempotency" error={errors.idempotency}>
            <input name="idempotency" value={form.idempotencyKey ?? ""}
              onInput={(e) => update({ idempotencyKey: e.currentTarget.value })} />
          </Field>
        </div>
        <Field label="Payload (JSON)" name="payload" error={errors.payload}
          hint={local ? `not JSON yet: ${local}` : "valid JSON"}>
          <textarea name="payload" class="mono" rows="10" spellcheck={false} value={form.payload}
            onInput={(e) => update({ payload: e.currentTarget.value })} />
        </Field>
        <Failure error={errors.form} />
        {scheduled ? (
          <p class="done" role="status">
            {scheduled.created ? "Scheduled" : "Already scheduled with this key"}:{" "}
            <a class="mono" href={`#/task/${scheduled.id}`}>{scheduled.id}</a>
          </p>
        ) : null}
        <button type="submit">Schedule</button>
      </form>
    </>
  );
}
