"""`hello` in Python: greets the name in its JSON payload.

`{"name": "Ada"}` → `{"greeting": "Hello, Ada!"}`, and a log record
`greeted on attempt N`.
"""

import waft


def greet(task):
    name = task.json().get("name", "world")
    waft.info(f"greeted on attempt {task.attempt}", name=name)
    return waft.success({"greeting": f"Hello, {name}!"})


Handler = waft.handler(greet)
