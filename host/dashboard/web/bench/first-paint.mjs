// Time to first paint of the dashboard's lists: from navigation start to the
// first row of the list in the page, in headless Chromium, for each address
// given. `node bench/first-paint.mjs URL RUNS HASH...`; prints the median
// and every run, in milliseconds.
import { open } from "../test/browser.mjs";

const [url, runs, ...hashes] = process.argv.slice(2);
const { browser, page } = await open();
const ready = {
  tasks: "table.tasks tbody tr",
  overview: 'tr[data-lambda]',
  dead: "table.dead tbody tr",
};
try {
  for (const hash of hashes) {
    const kind = hash.startsWith("#/tasks") ? "tasks" : hash.startsWith("#/dead") ? "dead" : "overview";
    const times = [];
    for (let i = 0; i < Number(runs); i++) {
      // A fresh load each time: the page, its contract and the call.
      await page.goto("about:blank");
      await page.goto(`${url}/${hash}`);
      await page.locator(ready[kind]).first().waitFor({ timeout: 60_000 });
      times.push(await page.evaluate(() => performance.now()));
    }
    const sorted = [...times].sort((a, b) => a - b);
    const median = sorted[Math.floor(sorted.length / 2)];
    console.log(`${hash}  median ${median.toFixed(0)} ms  runs ${times.map((t) => t.toFixed(0)).join(" ")}`);
  }
} finally {
  await browser.close();
}
