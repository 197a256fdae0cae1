// The load of scripts/bench-restate: N invocations of Bench/run over
// Restate's ingress, each its own HTTP request, answered when the workflow
// has ended (request sent → response received is its latency).
//
//   node load.cjs INGRESS_URL N CONCURRENCY            closed loop: CONCURRENCY in flight
//   node load.cjs INGRESS_URL N 0 RATE BURST           paced: BURST at once, the k-th due at k/RATE s
//
// The paced mode is the arrival pattern of `waft bench pipeline`'s latency
// phase (batches of 50 at half the peak rate). An invocation counts when
// it answered 200 with the three steps' answers. Prints one JSON line:
// count, failures, seconds (first sent → last answered), per_s, and
// latency percentiles in ms.
const http = require("node:http");

const [url, n, concurrency, rate, burst] = process.argv.slice(2).map((a, i) => (i ? Number(a) : a));
const target = new URL("Bench/run", url);
const agent = new http.Agent({ keepAlive: true, maxSockets: concurrency || Infinity });
const body = JSON.stringify({ posts: 3 });
const expected = JSON.stringify({ answers: ["ok", "ok", "ok"] }); // the three steps' answers
const latencies = [];
let failures = 0;

function invoke() {
    return new Promise((resolve) => {
        const sent = process.hrtime.bigint();
        const done = (ok) => {
            if (ok) latencies.push(Number(process.hrtime.bigint() - sent) / 1e6);
            else failures++;
            resolve();
        };
        const req = http.request(target, { method: "POST", agent, headers: { "content-type": "application/json" } }, (res) => {
            let text = "";
            res.setEncoding("utf8");
            res.on("data", (chunk) => (text += chunk));
            res.on("end", () => done(res.statusCode === 200 && text === expected));
        });
        req.on("error", () => done(false));
        req.end(body);
    });
}

async function closed() {
    let next = 0;
    const worker = async () => {
        while (next < n) {
            next++;
            await invoke();
        }
    };
    await Promise.all(Array.from({ length: Math.min(concurrency, n) }, worker));
}

async function paced() {
    const all = [];
    const start = performance.now();
    for (let k = 0; k < n; k += burst) {
        const wait = start + (k / rate) * 1000 - performance.now();
        if (wait > 0) await new Promise((r) => setTimeout(r, wait));
        for (let i = k; i < Math.min(k + burst, n); i++) all.push(invoke());
    }
    await Promise.all(all);
}

(async () => {
    const started = performance.now();
    await (concurrency ? closed() : paced());
    const seconds = (performance.now() - started) / 1000;
    latencies.sort((a, b) => a - b);
    const at = (q) => Math.round(latencies[Math.round((latencies.length - 1) * q)] ?? NaN);
    console.log(JSON.stringify({
        count: latencies.length, failures, seconds: +seconds.toFixed(3), per_s: Math.round(latencies.length / seconds),
        p50: at(0.5), p95: at(0.95), p99: at(0.99), max: at(1),
    }));
})();
