// Pieces every page uses: the hash router, data that refreshes, forms
// whose errors sit next to their fields, and the status badge.
import { useCallback, useEffect, useRef, useState } from "preact/hooks";
import { call, describe } from "./api.js";

/** The route: `#/tasks?lambda=x` → { path: "/tasks", query: URLSearchParams }. */
export function useRoute() {
  const read = () => {
    const [path, query] = (location.hash.slice(1) || "/").split("?");
    return { path, query: new URLSearchParams(query ?? "") };
  };
  const [route, setRoute] = useState(read);
  useEffect(() => {
    const changed = () => setRoute(read());
    addEventListener("hashchange", changed);
    return () => removeEventListener("hashchange", changed);
  }, []);
  return route;
}

export function go(path, query) {
  const search = query ? new URLSearchParams(
    Object.entries(query).filter(([, v]) => v !== undefined && v !== null && v !== ""),
  ).toString() : "";
  location.hash = search ? `${path}?${search}` : path;
}

/** Loads with `load()` now, again when `deps` change, and every `every` ms
 * when given. Returns { data, error, reload }. */
export function useData(load, deps, every) {
  const [state, setState] = useState({ data: undefined, error: undefined });
  const current = useRef(0);
  const reload = useCallback(async () => {
    const mine = ++current.current;
    try {
      const data = await load();
      if (mine === current.current) setState({ data, error: undefined });
    } catch (error) {
      if (mine === current.current) setState((s) => ({ data: s.data, error: describe(error) }));
    }
  }, deps);
  useEffect(() => {
    reload();
    if (!every) return undefined;
    const timer = setInterval(reload, every);
    return () => clearInterval(timer);
  }, [reload]);
  return { ...state, reload };
}

/** An action's state: run it, and show what the server said. */
export function useAction() {
  const [state, setState] = useState({ busy: false, error: undefined, done: undefined });
  const run = async (work, done) => {
    setState({ busy: true });
    try {
      const result = await work();
      setState({ busy: false, done: typeof done === "function" ? done(result) : done });
      return result;
    } catch (error) {
      setState({ busy: false, error: describe(error) });
      return undefined;
    }
  };
  return { ...state, run, clear: () => setState({ busy: false }) };
}

export function Failure({ error }) {
  return error ? <p class="error" role="alert">{error}</p> : null;
}

export function Done({ message }) {
  return message ? <p class="done" role="status">{message}</p> : null;
}

/** A labelled field with the server's (or the page's) message beside it. */
export function Field({ label, error, hint, children, name }) {
  return (
    <label class={`field${error ? " invalid" : ""}`} data-field={name}>
      <span class="label">{label}</span>
      {children}
      {hint && !error ? <span class="hint">{hint}</span> : null}
      {error ? <span class="field-error" role="alert">{error}</span> : null}
    </label>
  );
}

export function Status({ status }) {
  return <span class={`status s-${status}`}>{status.replace("_", " ")}</span>;
}

export function Empty({ children }) {
  return <p class="empty">{children}</p>;
}

/** The lambdas' names, for the pages' pickers. */
export function useLambdaNames() {
  const { data } = useData(async () => {
    const { lambdas } = await call("listLambdas", {});
    return lambdas.map((l) => l.name);
  }, []);
  return data ?? [];
}

export function LambdaPicker({ value, onInput, any = true, name = "lambda" }) {
  const names = useLambdaNames();
  return (
    <select name={name} value={value ?? ""} onInput={(e) => onInput(e.currentTarget.value || undefined)}>
      {any ? <option value="">any lambda</option> : <option value="">choose a lambda</option>}
      {names.map((n) => <option value={n}>{n}</option>)}
    </select>
  );
}

/** Which field a server's refusal is about, by what it names; `form` when
 * none. The message itself is shown as the server wrote it. */
export function fieldOf(message, fields) {
  const lower = message.toLowerCase();
  for (const [field, words] of Object.entries(fields)) {
    if (words.some((w) => lower.includes(w))) return field;
  }
  return "form";
}

/** Where a new task goes — its collection, key and priority — in the forms
 * that make tasks (schedule, cron). */
export function Placement({ form, errors, update }) {
  return (
    <>
      <Field label="Collection" name="collection" error={errors.collection}>
        <input name="collection" placeholder="default" value={form.collection ?? ""}
          onInput={(e) => update({ collection: e.currentTarget.value })} />
      </Field>
      <Field label="Key" name="key" error={errors.key}>
        <input name="key" placeholder="none (a customer, an account…)" value={form.key ?? ""}
          onInput={(e) => update({ key: e.currentTarget.value })} />
      </Field>
      <Field label="Priority" name="priority" error={errors.priority}>
        <input name="priority" type="number" min="0" placeholder="the lambda's default" value={form.priority ?? ""}
          onInput={(e) => update({ priority: e.currentTarget.value })} />
      </Field>
    </>
  );
}
