// `hello` in JavaScript: greets the name in its JSON payload.
//
// `{"name": "Ada"}` → `{"greeting": "Hello, Ada!"}`, and a log record
// `greeted on attempt N`.

import * as waft from "../../../sdk/js/waft.js";

export const handler = waft.handler((task) => {
  const { name = "world" } = task.json();
  waft.info(`greeted on attempt ${task.attempt}`, { name });
  return waft.success({ greeting: `Hello, ${name}!` });
});
