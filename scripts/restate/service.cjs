// The Restate side of scripts/bench-restate: a service `Bench` whose handler
// `run` is a three-step workflow, each step a `ctx.run` that POSTs to the
// loopback server and returns its answer (journaled before the next step).
//
//   NODE_PATH=…/node_modules TARGET_URL=http://127.0.0.1:PORT/ PORT=9080 node service.cjs
//
// Input `{"posts": 3}` (steps; 3 by default), output the answers.

// The SDK calls Promise.withResolvers, which Node 20 lacks: without it every
// invocation fails and Restate retries it silently.
Promise.withResolvers ??= function () {
    let resolve, reject;
    const promise = new this((yes, no) => ((resolve = yes), (reject = no)));
    return { promise, resolve, reject };
};
const http = require("node:http");
const restate = require("@restatedev/restate-sdk");

const target = new URL(process.env.TARGET_URL);
const agent = new http.Agent({ keepAlive: true });

// POSTs `body` as JSON to the loopback server; its answer as text.
function post(body) {
    return new Promise((resolve, reject) => {
        const req = http.request(target, { method: "POST", agent, headers: { "content-type": "application/json" } }, (res) => {
            let text = "";
            res.setEncoding("utf8");
            res.on("data", (chunk) => (text += chunk));
            res.on("end", () => (res.statusCode === 200 ? resolve(text) : reject(new Error(`HTTP ${res.statusCode}`))));
        });
        req.on("error", reject);
        req.end(JSON.stringify(body));
    });
}

const bench = restate.service({
    name: "Bench",
    handlers: {
        async run(ctx, input) {
            const steps = input?.posts ?? 3;
            const answers = [];
            for (let n = 0; n < steps; n++) {
                answers.push(await ctx.run(`post-${n}`, () => post({ n })));
            }
            return { answers };
        },
    },
});

restate.endpoint().bind(bench).listen(Number(process.env.PORT ?? 9080));
