// The night-time incident, entirely from the page: a lambda's tasks die;
// its owner sees it on the overview, reads a failed attempt's log, pauses
// the lambda (the CLI confirms its tasks are held), deploys a fix, resumes,
// and redrives the dead letters in bulk (the CLI confirms they ran). Then
// every other page: tasks, a task's children, schedule and cron forms with
// the server's refusals next to their fields, versions and rollback, a
// selected dead letter redriven onto a chosen version, cancel, a task
// waiting for a signal approved from its page, and a lambda deleted from
// its page (refused first while a task of it waits).
//
// The harness (tests/dashboard.rs) has deployed `mailer` (failing, one
// attempt: three tasks dead), `hello`, `chain` with a finished parent, and
// `approval`, which waits for the signals its payload names, and a `script`
// task whose journal holds 450 entries.
import assert from "node:assert/strict";
import { env, open, shot, shotOf, steps, task, until, visit, waft, waftStatus } from "./browser.mjs";

const { browser, page, problems } = await open();
const chartTotal = async (chart, series) =>
  Number(await page.locator(`[data-chart="${chart}"]`).getAttribute(`data-${series}`));
const cell = (lambda, column) =>
  page.locator(`tr[data-lambda="${lambda}"] td`).nth(column).innerText();
const dead = JSON.parse(waft("task", "list", "--lambda", "mailer", "--status", "dead", "--json"));
assert.equal(dead.length, 3, "the harness left three dead mailer tasks");
let held;

try {
  await steps([
    ["the overview shows the dead letters and failures", async () => {
      await visit(page, "");
      await until("mailer shows 3 dead", async () => (await cell("mailer", 12)) === "3");
      assert.equal(await cell("mailer", 11), "3", "3 failures in the last hour");
      assert.equal(await cell("mailer", 1), "open");
      assert.equal(await page.getByText("Loading Waft").count(), 0, "the placeholder is replaced");
      assert.match(await cell("hello", 10), /^[1-9]/, "hello succeeded");
      await shot(page, "overview");
    }],
    ["the charts show the last hour's executions, latency and depth", async () => {
      // The HSC adds its counts to the store every 5 s; the page reads
      // them every 10 s.
      await until("the overall chart counts successes and failures", async () =>
        (await chartTotal("executions-all", "ok")) > 0 && (await chartTotal("executions-all", "bad")) >= 3,
      40_000);
      assert.ok((await chartTotal("latency-all", "p50")) > 0, "a latency was recorded");
      const chart = page.locator('[data-chart="executions-all"] svg');
      assert.match(await chart.locator("title").first().textContent(), /Executions/);
      assert.ok((await chart.locator("rect.bar").count()) > 0, "bars are drawn");
      assert.match(await chart.locator("rect.hover title").last().textContent(), /succeeded: \d+, failed: \d+/);
      await page.locator("section.history details summary").click();
      assert.match(await page.locator(".history-table tbody").innerText(), /\d/);
      await shotOf(page.locator("section.history"), "charts");
      await page.locator("section.history details summary").click();
      await page.locator('button[data-range="24h"]').click();
      await page.getByText("a point every 15 min").waitFor();
      assert.ok((await chartTotal("executions-all", "bad")) >= 3, "the day holds the hour");
      await page.locator('button[data-range="7d"]').click();
      await page.getByText("a point every 120 min").waitFor();
      await visit(page, "#/lambda/mailer");
      await until("mailer's own chart counts its 3 failures", async () =>
        (await chartTotal("executions-mailer", "bad")) === 3);
      assert.equal(await chartTotal("executions-mailer", "ok"), 0, "mailer never succeeded");
    }],
    ["a failed task's log is readable", async () => {
      await visit(page, `#/task/${dead[0].id}`);
      const log = page.locator(".attempt pre.log").first();
      await log.waitFor();
      assert.match(await log.innerText(), /attempt 1, succeeding on 5 smtp timeout/);
      assert.match(await page.locator(".attempt").first().innerText(), /retriable/);
      await shot(page, "task-failed");
    }],
    ["pausing the lambda from the page holds its tasks", async () => {
      await visit(page, "");
      await page.locator('tr[data-lambda="mailer"] button', { hasText: "Pause" }).click();
      await until("the gate reads paused", async () => (await cell("mailer", 1)) === "paused");
      held = waft("task", "schedule", "mailer", "--payload", '{"succeed_on":1}');
      await until("the overview counts it held", async () => (await cell("mailer", 6)) === "1");
      const shown = task(held);
      assert.equal(shown.status, "new", "a paused lambda's task is not claimed");
      assert.equal(shown.held, true);
      assert.deepEqual(
        JSON.parse(waft("gate", "list", "--json")).map((g) => [g.lambda, g.state]),
        [["mailer", "paused"]],
      );
    }],
    ["the owner deploys a fix and resumes from the gates page", async () => {
      waft("lambda", "deploy", "mailer", env("WAFT_HELLO"));
      await visit(page, "#/gates");
      await page.locator('tr[data-gate="mailer/"]').waitFor();
      await shot(page, "gates");
      await page.locator('tr[data-gate="mailer/"] button', { hasText: "Resume" }).click();
      await page.getByText("Every gate is open.").waitFor();
      assert.match(await page.locator(".done").innerText(), /mailer opened: 1 task\(s\) released/);
      assert.equal(waftStatus("task", "wait", held, "--timeout", "20s"), 0, "the held task ran");
    }],
    ["a bulk redrive from the page re-runs every dead letter", async () => {
      await visit(page, "#/dead?lambda=mailer");
      await until("three dead letters listed", async () =>
        (await page.locator("table.dead tbody tr").count()) === 3);
      assert.match(await page.locator("table.dead tbody").innerText(), /smtp timeout/);
      await shot(page, "dead-letters");
      await page.getByRole("button", { name: "Redrive all matching" }).click();
      await page.getByText("3 matching the filter redriven onto the current version.").waitFor();
      for (const { id } of dead) {
        assert.equal(waftStatus("task", "wait", id, "--timeout", "20s"), 0, `${id} ran again`);
        const { attempts } = JSON.parse(waft("dlq", "show", id, "--json"));
        assert.deepEqual(attempts.map((a) => a.outcome), ["retriable", "success"],
          "the dead attempt, then the redriven one");
      }
      await page.getByText("No dead letters match.").waitFor();
    }],
    ["the task list filters and pages", async () => {
      await visit(page, "#/tasks?lambda=mailer");
      await page.locator("table.tasks").waitFor();
      await page.selectOption('select[name="status"]', "success");
      await until("four successes listed", async () =>
        (await page.locator("table.tasks tbody tr").count()) === 4);
      assert.match(page.url(), /status=success/);
      assert.match(await page.locator(".counts").innerText(), /success\s*4/);
      await shot(page, "tasks");
    }],
    ["a task's page shows its children as a tree", async () => {
      const [parent] = JSON.parse(waft("task", "list", "--lambda", "chain", "--json"));
      await visit(page, `#/task/${parent.id}`);
      await until("two children", async () => (await page.locator("ul.tree > li").count()) === 2);
      assert.match(await page.locator("ul.tree").innerText(), /hello\s+success[^]*hello\s+success/);
      await page.locator("ul.tree > li button").first().click();
      await page.locator("ul.tree ul.tree, ul.tree .muted").first().waitFor();
      await shot(page, "task");
    }],
    ["a task's page shows its journal, as the CLI does", async () => {
      // The chain parent scheduled two children: each is a journal entry,
      // made live by its first attempt.
      const [parent] = JSON.parse(waft("task", "list", "--lambda", "chain", "--json"));
      const { entries: journal } = JSON.parse(waft("task", "journal", parent.id, "--json"));
      const children = journal.filter((e) => e.call === "waft:lambda/children.schedule");
      assert.equal(children.length, 2, "two children in the journal");
      await visit(page, `#/task/${parent.id}`);
      await until("a row an entry", async () =>
        (await page.locator("table.journal tbody tr").count()) === journal.length);
      for (const entry of journal) {
        const row = page.locator(`table.journal tr[data-seq="${entry.seq}"] td`);
        assert.equal(await row.nth(0).innerText(), String(entry.seq));
        assert.ok((await row.nth(1).innerText()).startsWith(entry.call), entry.call);
        const words = (text) => text.replace(/\s+/g, " ").trim();
        assert.equal(words(await row.nth(2).innerText()), words(entry.summary));
        assert.equal(await row.nth(3).innerText(), `live #${entry.live_attempt}`, "one attempt, nothing replayed");
        assert.match(await row.nth(5).innerText(), /^\d+(\.\d+)?(µs|ms|s)$/);
      }
      // The children step's screenshot ("task") shows it.
    }],
    ["a long journal is read a page at a time", async () => {
      const [task] = JSON.parse(waft("task", "list", "--lambda", "script", "--json"));
      const { entries: journal } = JSON.parse(waft("task", "journal", task.id, "--json"));
      assert.equal(journal.length, 450, "a random draw an entry");
      const seqs = async () =>
        page.locator("table.journal tbody tr").evaluateAll((rows) => rows.map((r) => Number(r.dataset.seq)));
      const range = (from, to) => Array.from({ length: to - from }, (_, k) => from + k);
      await visit(page, `#/task/${task.id}`);
      await until("the first page", async () => (await seqs()).length === 200);
      assert.deepEqual(await seqs(), range(0, 200));
      await page.getByRole("button", { name: "Next entries" }).click();
      await until("the second page", async () => (await seqs())[0] === 200);
      assert.deepEqual(await seqs(), range(200, 400));
      await page.getByRole("button", { name: "Next entries" }).click();
      await until("the last page", async () => (await seqs())[0] === 400);
      assert.deepEqual(await seqs(), range(400, 450));
      assert.equal(await page.getByRole("button", { name: "Next entries" }).count(), 0, "no page after the last");
      assert.match(page.url(), /from=400$/);
      await page.getByRole("button", { name: "Previous entries" }).click();
      await until("back a page", async () => (await seqs())[0] === 200);
      // Each page is at its own address.
      await visit(page, `#/task/${task.id}?from=440`);
      await until("a linked page", async () => (await seqs())[0] === 440);
      assert.deepEqual(await seqs(), range(440, 450));
      await shot(page, "journal-pages");
    }],
    ["scheduling shows the server's refusal next to the payload", async () => {
      await visit(page, "#/schedule?lambda=hello");
      await page.fill('textarea[name="payload"]', '{"name": ');
      await page.getByRole("button", { name: "Schedule" }).click();
      const error = page.locator('[data-field="payload"] .field-error');
      await error.waitFor();
      assert.match(await error.innerText(), /^invalid argument: the payload is not JSON: EOF while parsing/);
      await shot(page, "schedule-invalid");
      await page.fill('textarea[name="payload"]', '{"name": "Grace"}');
      await page.fill('input[name="key"]', "customer 42/é");
      await page.getByRole("button", { name: "Schedule" }).click();
      await page.locator(".done a").click();
      await until("the scheduled task succeeded", async () =>
        /success/.test(await page.locator(".sub .status").innerText()), 20_000);
      assert.match(await page.locator("pre.output").innerText(), /Hello, Grace!/);
      // Its key is on its page, a link to the tasks of that key.
      assert.match(await page.locator(".sub").innerText(), /key customer 42\/é/);
      await page.locator(".sub").getByRole("link", { name: "customer 42/é" }).click();
      await until("the key's one task listed", async () =>
        (await page.locator("table.tasks tbody tr").count()) === 1);
      assert.equal(await page.locator('input[name="key"]').inputValue(), "customer 42/é");
      assert.match(await page.locator("table.tasks tbody tr").innerText(), /customer 42\/é/);
    }],
    ["a cron expression is previewed, refused next to its field, saved, removed", async () => {
      await visit(page, "#/cron");
      await page.selectOption('select[name="lambda"]', "hello");
      await page.fill('input[name="expression"]', "61 * * * *");
      const error = page.locator('[data-field="expression"] .field-error');
      await error.waitFor();
      assert.match(await error.innerText(), /^invalid argument: invalid cron expression "61 \* \* \* \*"/);
      await shot(page, "cron-invalid");
      await page.fill('input[name="expression"]', "0 3 * * *");
      await until("five occurrences previewed", async () =>
        (await page.locator(".preview li").count()) === 5);
      assert.match(await page.locator(".preview li").first().innerText(), /03:00:00Z$/);
      await page.getByRole("button", { name: "Save schedule" }).click();
      await page.locator("table.crons tbody tr").waitFor();
      assert.equal(JSON.parse(waft("cron", "list", "--json")).length, 1);
      await shot(page, "cron");
      await page.locator("table.crons button", { hasText: "Remove" }).click();
      await page.getByText("No periodic schedule.").waitFor();
      assert.equal(JSON.parse(waft("cron", "list", "--json")).length, 0);
    }],
    ["a lambda's versions show their config, and roll back", async () => {
      await visit(page, "#/lambda/mailer");
      await page.locator('section[data-version="1"]').waitFor();
      assert.match(await page.locator('section[data-version="2"] h3').innerText(), /current/);
      assert.match(await page.locator('section[data-version="1"] .config').first().innerText(), /attempts\s+1/);
      assert.match(await page.locator('section[data-version="1"] .config').first().innerText(), /on divergence\s+fail/);
      await shot(page, "lambda");
      await page.locator('section[data-version="1"] button', { hasText: "Roll back" }).click();
      await page.getByText("Rolled back: version 3 runs version 1's component and configuration.").waitFor();
      assert.equal(JSON.parse(waft("lambda", "get", "mailer", "--json")).version, 3);
      await visit(page, "#/lambdas");
      await page.locator("table.lambdas").waitFor();
      await shot(page, "lambdas");
    }],
    ["a selection of dead letters is redriven onto a chosen version", async () => {
      // Version 3 is version 1 again: failing, one attempt.
      const failing = [1, 2].map(() =>
        waft("task", "schedule", "mailer", "--payload", '{"succeed_on":5}'));
      for (const id of failing) assert.equal(waftStatus("task", "wait", id, "--timeout", "20s"), 21, "dead");
      await visit(page, "#/dead?lambda=mailer");
      await until("two dead letters", async () => (await page.locator("table.dead tbody tr").count()) === 2);
      await page.locator(`tr[data-task="${failing[0]}"] input[type=checkbox]`).check();
      await page.selectOption('select[name="version"]', "2");
      await page.getByRole("button", { name: "Redrive selected (1)" }).click();
      await page.getByText("1 selected redriven onto version 2.").waitFor();
      assert.equal(waftStatus("task", "wait", failing[0], "--timeout", "20s"), 0, "ran on the fix");
      assert.equal(task(failing[0]).version, 2, "pinned to the chosen version");
      assert.equal(task(failing[1]).status, "dead", "the unselected one stays dead");
    }],
    ["a waiting task is cancelled from its page", async () => {
      waft("gate", "pause", "hello");
      const waiting = waft("task", "schedule", "hello", "--payload", "{}");
      await visit(page, `#/task/${waiting}`);
      await page.getByRole("button", { name: "Cancel" }).click();
      await page.getByText("Cancelled.").waitFor();
      assert.equal(task(waiting).status, "cancelled");
      waft("gate", "resume", "hello");
    }],
    ["a task waiting for a signal is approved from its page", async () => {
      const waiting = waft("task", "schedule", "approval", "--payload",
        '{"signals": ["approved"], "signal_ms": 600000}');
      await until("the task is suspended", async () => task(waiting).status === "suspended");
      assert.equal(task(waiting).waiting_for_signal, "approved");
      await visit(page, `#/task/${waiting}`);
      await page.getByText("Waiting for signal approved").waitFor();
      assert.equal(await page.getByText("Cancelled.").count(), 0, "the last task's message is gone");
      await visit(page, "");
      await until("the overview counts it waiting for a signal",
        async () => (await cell("approval", 5)) === "1 (1 on signals)");
      await visit(page, `#/task/${waiting}`);
      await page.getByText("Waiting for signal approved").waitFor();
      assert.equal(await page.locator('input[name="signal"]').inputValue(), "approved");
      await page.locator('input[name="signal-payload"]').fill('{"by": "Ada"}');
      await shot(page, "task-signal");
      await page.getByRole("button", { name: "Send signal" }).click();
      // Said above the form, which goes once the resumed task ends.
      await page.getByText("Signal approved sent: the task resumes.").waitFor();
      assert.equal(waftStatus("task", "wait", waiting, "--timeout", "20s"), 0, "it resumed and ended");
      const output = JSON.parse(task(waiting).output);
      assert.deepEqual(output.signals, ['{"by": "Ada"}']);
    }],
    ["a lambda is deleted from its page, refused first while a task of it waits", async () => {
      waft("lambda", "deploy", "scratch", env("WAFT_HELLO"), "--retain", "success=1h");
      const waiting = waft("task", "schedule", "scratch", "--payload", "{}", "--delay", "1h");
      await visit(page, "#/lambda/scratch");
      await page.locator('section[data-version="1"]').waitFor();
      assert.match(await page.locator('section[data-version="1"] .config').first().innerText(), /retention\s+success 1 h/);
      await page.getByRole("button", { name: "Delete lambda" }).click();
      await page.getByText("1 tasks that may still run").waitFor();
      assert.equal(JSON.parse(waft("lambda", "get", "scratch", "--json")).name, "scratch", "refused: still there");
      await page.locator('input[name="drop-tasks"]').check();
      await shot(page, "lambda-delete");
      await page.getByRole("button", { name: "Delete lambda" }).click();
      await page.locator("table.lambdas").waitFor();
      assert.equal(await page.locator('tr[data-lambda="scratch"]').count(), 0);
      assert.notEqual(waftStatus("lambda", "get", "scratch"), 0, "gone");
      assert.notEqual(waftStatus("task", "get", waiting), 0, "its task too");
    }],
  ]);
  assert.deepEqual(problems, [], "no script error on any page");
} finally {
  await browser.close();
}
