// waft-world: http-lambda
// `gather` in JavaScript: POSTs to every URL of `{"urls": ["http://…",
// …]}` at once (`Promise.all`), and judges the answers together: any 429
// or 5xx, or a failure to get an answer, is retriable; otherwise a success
// whose output is `{"statuses": [...]}`, in the order of `urls`. For the
// journal's tests of requests in flight together, which finish in any
// order.

import * as waft from "../../../sdk/js/waft.js";

export const handler = waft.handler(async (task) => {
  const { urls } = task.json();
  let statuses;
  try {
    statuses = await Promise.all(
      urls.map(async (url) => {
        const response = await waft.fetch(url, { method: "POST" });
        await response.text();
        return response.status;
      }),
    );
  } catch (failure) {
    return waft.retry(`${failure}`);
  }
  if (statuses.some((status) => status === 429 || status >= 500)) {
    return waft.retry(`answered ${statuses.join(", ")}`);
  }
  return waft.success({ statuses });
});
