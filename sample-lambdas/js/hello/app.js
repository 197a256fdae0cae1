// `hello` in JavaScript: greets the name in its JSON payload.
//
// `{"name": "Ada"}` → `{"greeting": "Hello, Ada!"}`, and a log record
// `greeted on attempt N`. With `"children": [{"lambda": ..., "payload":
// {...}, "key": ...}]` it schedules those tasks (keyed when a key is given), waits for them all to end
// (`waft.waitAll`) and adds their ends to its output, `"ends": [{"id",
// "status", "output"}]`.

import * as waft from "../../../sdk/js/waft.js";

export const handler = waft.handler(async (task) => {
  const { name = "world", children = [] } = task.json();
  waft.info(`greeted on attempt ${task.attempt}`, { name });
  const output = { greeting: `Hello, ${name}!` };
  if (children.length > 0) {
    const ids = children.map((child) => waft.schedule(child.lambda, child.payload ?? {}, { key: child.key }));
    const ends = await waft.waitAll(ids);
    output.ends = ends.map((end) => ({
      id: end.id,
      status: end.status,
      output: new TextDecoder().decode(end.output ?? new Uint8Array()),
    }));
  }
  return waft.success(output);
});
