// With auth on: the page asks for a token once, then every action is
// authorized as the gRPC call would be. A scheduler token sees its lambda
// but cannot pause it, and the refusal is the server's.
//
// The harness (tests/dashboard.rs) runs `waft dev` with auth, has deployed
// `mailer` and `hello`, and passes a scheduler token for `mailer`.
import assert from "node:assert/strict";
import { env, open, shot, steps, until, visit, waft } from "./browser.mjs";

const { browser, page, problems } = await open();
try {
  await steps([
    ["the page asks for a token once", async () => {
      await visit(page, "");
      const prompt = page.getByRole("dialog", { name: "API token" });
      await prompt.waitFor();
      await shot(page, "token");
      await page.fill('input[name="token"]', env("WAFT_SCHEDULER_TOKEN"));
      await page.getByRole("button", { name: "Use this token" }).click();
      await page.locator('tr[data-lambda="mailer"]').waitFor();
      await visit(page, "#/tasks");
      await page.locator("table.tasks").waitFor();
      assert.equal(await prompt.count(), 0, "not asked again");
    }],
    ["the token is kept by the tab alone", async () => {
      const kept = await page.evaluate(() => ({
        tab: sessionStorage.getItem("waft.token"),
        browser: localStorage.getItem("waft.token"),
      }));
      assert.deepEqual(kept, { tab: env("WAFT_SCHEDULER_TOKEN"), browser: null });
      const other = await page.context().newPage();
      try {
        await visit(other, "");
        await other.getByRole("dialog", { name: "API token" }).waitFor();
      } finally {
        await other.close();
      }
    }],
    ["a scheduler token reads only its lambdas", async () => {
      await visit(page, "#/tasks");
      await until("only mailer's tasks listed", async () => {
        const lambdas = await page.locator("table.tasks tbody tr td:nth-child(2)").allInnerTexts();
        return lambdas.length > 0 && lambdas.every((l) => l === "mailer");
      });
    }],
    ["a scheduler token cannot pause, and the page says why", async () => {
      await visit(page, "");
      await page.locator('tr[data-lambda="mailer"] button', { hasText: "Pause" }).click();
      const error = page.locator("p.error");
      await error.waitFor();
      assert.match(await error.innerText(), /^permission denied: /);
      await shot(page, "denied");
      assert.deepEqual(JSON.parse(waft("gate", "list", "--json")), [], "no gate was set");
    }],
    ["a scheduler token cannot redrive either", async () => {
      await visit(page, "#/dead?lambda=mailer");
      await page.getByRole("button", { name: "Redrive all matching" }).click();
      await until("the refusal", async () => /^permission denied: /.test(await page.locator("p.error").innerText()));
    }],
  ]);
  assert.deepEqual(problems, [], "no script error on any page");
} finally {
  await browser.close();
}
