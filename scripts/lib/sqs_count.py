#!/usr/bin/env python3
"""A loopback TCP proxy in front of an SQS-compatible server that counts the
requests passing through it by action (the `AmazonSQS.<Action>` target each
carries), for the benchmark scripts: what one process asks of the queues,
counted on the wire. Usage: sqs_count.py LISTEN_PORT UPSTREAM_PORT COUNT_FILE
(the counts, as JSON, rewritten every half second)."""

import asyncio
import json
import os
import re
import sys
from collections import Counter

TARGET = re.compile(rb"AmazonSQS\.([A-Za-z]+)[^A-Za-z]")
counts = Counter()


async def pump(reader, writer, count):
    tail = b""
    try:
        while data := await reader.read(65536):
            if count:
                tail += data
                end = 0
                for match in TARGET.finditer(tail):
                    counts[match.group(1).decode()] += 1
                    end = match.end()
                tail = tail[max(end, len(tail) - 64):]
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        writer.close()


async def main():
    listen, upstream, count_file = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]

    async def serve(client_reader, client_writer):
        server_reader, server_writer = await asyncio.open_connection("127.0.0.1", upstream)
        await asyncio.gather(
            pump(client_reader, server_writer, True),
            pump(server_reader, client_writer, False),
        )

    server = await asyncio.start_server(serve, "127.0.0.1", listen)
    async with server:
        while True:
            with open(count_file + ".tmp", "w") as out:
                json.dump(counts, out)
            os.replace(count_file + ".tmp", count_file)
            await asyncio.sleep(0.5)


asyncio.run(main())
