// What the dashboard's browser tests share: headless Chromium (Debian's
// package, driven by playwright-core), the `waft` CLI to check what the
// page did, and screenshots.
import { execFileSync } from "node:child_process";
import { mkdirSync } from "node:fs";
import { chromium } from "playwright-core";

export const env = (name) => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set (the Rust test harness sets it)`);
  return value;
};

export async function open() {
  const browser = await chromium.launch({
    executablePath: process.env.WAFT_CHROMIUM ?? "/usr/bin/chromium",
    // Without these, Chromium's background connections flood a closed
    // network with refusals (see NOTES.md).
    args: [
      "--no-sandbox",
      "--disable-gpu",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
      "--no-first-run",
    ],
  });
  // A context of its own, as a user's browser profile: a test may open a
  // second tab in it (`page.context().newPage()`).
  const context = await browser.newContext({ viewport: { width: 1360, height: 860 } });
  const page = await context.newPage();
  page.setDefaultTimeout(15_000);
  const problems = [];
  page.on("pageerror", (error) => problems.push(`page error: ${error.message}`));
  page.on("dialog", (dialog) => dialog.accept());
  return { browser, page, problems };
}

/** Runs the CLI against the test's Waft; its standard output. */
export function waft(...args) {
  return execFileSync(env("WAFT_BIN"), args, { encoding: "utf8", env: process.env }).trim();
}

/** The CLI's exit code (for `task wait`, how the task ended). */
export function waftStatus(...args) {
  try {
    execFileSync(env("WAFT_BIN"), args, { env: process.env, stdio: "ignore" });
    return 0;
  } catch (error) {
    return error.status;
  }
}

export function task(id) {
  return JSON.parse(waft("task", "get", id, "--json"));
}

export async function shot(page, name) {
  const dir = env("WAFT_SCREENSHOTS");
  mkdirSync(dir, { recursive: true });
  await page.screenshot({ path: `${dir}/${name}.png`, fullPage: true });
}

/** A screenshot of one part of the page (a locator). */
export async function shotOf(locator, name) {
  const dir = env("WAFT_SCREENSHOTS");
  mkdirSync(dir, { recursive: true });
  await locator.screenshot({ path: `${dir}/${name}.png` });
}

export async function visit(page, hash) {
  await page.goto(`${env("WAFT_URL")}/${hash}`);
}

/** Runs the steps in order, naming the one that fails. */
export async function steps(list) {
  for (const [name, step] of list) {
    const started = Date.now();
    try {
      await step();
    } catch (error) {
      console.error(`✗ ${name}`);
      throw error;
    }
    console.log(`✓ ${name} (${Date.now() - started} ms)`);
  }
}

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** Waits until `check` returns a truthy value; fails saying `what`. */
export async function until(what, check, within = 15_000) {
  const deadline = Date.now() + within;
  let last;
  while (Date.now() < deadline) {
    try {
      const value = await check();
      if (value) return value;
    } catch (error) {
      last = error;
    }
    await sleep(100);
  }
  throw new Error(`timed out waiting until ${what}${last ? `: ${last.message}` : ""}`);
}
