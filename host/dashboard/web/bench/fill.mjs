// Fills a Waft with tasks through the page's own client (gRPC-web):
// `node bench/fill.mjs URL LAMBDA COUNT [COLLECTIONS]` schedules COUNT tasks
// of LAMBDA in batches of 5,000, spread over COLLECTIONS collections.
import { call, connect, utf8 } from "../src/api.js";

const [url, lambda, count, collections = "1"] = process.argv.slice(2);
await connect(url);
const total = Number(count);
const BATCH = 5_000;
const payload = utf8('{"name":"bench"}');
let next = 0;
const started = Date.now();
async function worker() {
  while (next < total) {
    const from = next;
    next = Math.min(total, next + BATCH);
    const tasks = [];
    for (let i = from; i < next; i++) {
      tasks.push({ lambda, payload, collection: `c${i % Number(collections)}` });
    }
    await call("scheduleBatch", { tasks });
  }
}
await Promise.all([worker(), worker(), worker()]);
const seconds = (Date.now() - started) / 1000;
console.log(`${total} tasks of ${lambda} in ${seconds.toFixed(1)} s (${Math.round(total / seconds)}/s)`);
