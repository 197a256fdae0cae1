// Waft's dashboard: the layout, the pages' routes, and the token prompt.
import { render } from "preact";
import { useEffect, useState } from "preact/hooks";
import { connect, token, whenUnauthenticated } from "./api.js";
import { useRoute } from "./ui.jsx";
import { Overview } from "./pages/overview.jsx";
import { Tasks } from "./pages/tasks.jsx";
import { TaskPage } from "./pages/task.jsx";
import { DeadLetters } from "./pages/dead.jsx";
import { Gates } from "./pages/gates.jsx";
import { Crons } from "./pages/cron.jsx";
import { Lambdas, LambdaPage } from "./pages/lambdas.jsx";
import { Schedule } from "./pages/schedule.jsx";

const SECTIONS = [
  ["/", "Overview"],
  ["/tasks", "Tasks"],
  ["/dead", "Dead letters"],
  ["/gates", "Gates"],
  ["/cron", "Cron"],
  ["/lambdas", "Lambdas"],
  ["/schedule", "Schedule"],
];

function page({ path, query }) {
  const [, first, rest] = path.match(/^\/([^/]*)\/?(.*)$/) ?? [];
  switch (first) {
    case "": return <Overview />;
    case "tasks": return <Tasks query={query} />;
    // Keyed by the task: another task's page starts afresh (no message left
    // from an action on the last one).
    case "task": return <TaskPage key={rest} id={decodeURIComponent(rest)} query={query} />;
    case "dead": return <DeadLetters query={query} />;
    case "gates": return <Gates />;
    case "cron": return <Crons />;
    case "lambdas": return <Lambdas />;
    case "lambda": return <LambdaPage name={decodeURIComponent(rest)} />;
    case "schedule": return <Schedule query={query} />;
    default: return <p class="error">No page here: {path}</p>;
  }
}

/** Asked once, when a call answers UNAUTHENTICATED; kept by this tab. */
function TokenPrompt({ onSaved }) {
  const [value, setValue] = useState("");
  return (
    <div class="modal" role="dialog" aria-label="API token">
      <form
        class="card"
        onSubmit={(e) => {
          e.preventDefault();
          token.set(value.trim());
          onSaved();
        }}
      >
        <h2>This Waft needs a token</h2>
        <p>Paste an API token (<code>waft token create</code> makes one). This tab keeps it until
          it closes and sends it with every call, which the server authorizes as it would the
          CLI's.</p>
        <input name="token" type="password" autocomplete="off" value={value}
          onInput={(e) => setValue(e.currentTarget.value)} />
        <button type="submit" disabled={!value.trim()}>Use this token</button>
      </form>
    </div>
  );
}

function App() {
  const route = useRoute();
  const [asking, setAsking] = useState(false);
  const [generation, setGeneration] = useState(0);
  useEffect(() => whenUnauthenticated(() => setAsking(true)), []);
  const section = "/" + (route.path.split("/")[1] ?? "");
  return (
    <>
      <header>
        <a class="brand" href="#/">Waft</a>
        <nav>
          {SECTIONS.map(([path, label]) => (
            <a href={`#${path}`} class={section === path ||
              (path === "/tasks" && section === "/task") ||
              (path === "/lambdas" && section === "/lambda") ? "active" : ""}>{label}</a>
          ))}
        </nav>
        {token.get() ? (
          <button class="link" onClick={() => { token.forget(); setGeneration((g) => g + 1); }}>
            Forget token
          </button>
        ) : null}
      </header>
      <main key={generation}>{page(route)}</main>
      {asking ? (
        <TokenPrompt onSaved={() => { setAsking(false); setGeneration((g) => g + 1); }} />
      ) : null}
    </>
  );
}

connect()
  .then(() => {
    const root = document.getElementById("app");
    root.replaceChildren();
    render(<App />, root);
  })
  .catch((error) => {
    document.getElementById("app").innerHTML = "";
    const p = document.createElement("p");
    p.className = "error";
    p.textContent = String(error.message ?? error);
    document.getElementById("app").append(p);
  });
