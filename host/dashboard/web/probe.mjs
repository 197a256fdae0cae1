import { chromium } from "playwright-core";
const browser = await chromium.launch({ executablePath: "/usr/bin/chromium", args: ["--no-sandbox","--disable-gpu","--disable-background-networking","--disable-component-update","--disable-sync","--no-first-run"] });
const page = await browser.newPage({ viewport: { width: 1300, height: 800 } });
page.on("console", (m) => console.log("console:", m.text()));
page.on("pageerror", (e) => console.log("pageerror:", e.message));
for (const hash of process.argv.slice(2)) {
  await page.goto(`http://127.0.0.1:7700/${hash}`);
  await page.waitForTimeout(1500);
  const name = hash.replace(/[^a-z]/g, "") || "overview";
  await page.screenshot({ path: `/tmp/shot-${name}.png`, fullPage: true });
  console.log(hash, (await page.textContent("main"))?.slice(0, 300));
}
await browser.close();
