"""`hello` in Python: greets the name in its JSON payload.

`{"name": "Ada"}` → `{"greeting": "Hello, Ada!"}`, and a log record
`greeted on attempt N`. With `"children": [{"lambda": ..., "payload": {...},
"key": ...}]` it schedules those tasks (keyed when a key is given), waits for them all to end (`waft.wait_all`) and
adds their ends to its output, `"ends": [{"id", "status", "output"}]`.
"""

import waft


def greet(task):
    request = task.json()
    name = request.get("name", "world")
    waft.info(f"greeted on attempt {task.attempt}", name=name)
    output = {"greeting": f"Hello, {name}!"}
    if request.get("children"):
        ids = [waft.schedule(c["lambda"], c.get("payload", {}), key=c.get("key")) for c in request["children"]]
        output["ends"] = [
            {"id": end.id, "status": end.status, "output": (end.output or b"").decode()}
            for end in waft.wait_all(ids)
        ]
    return waft.success(output)


Handler = waft.handler(greet)
