"""`racer-tui api`: an OpenAI-compatible HTTP server over one loaded engine.

    protocol    the request bodies and OpenAI's error object
    chat_input  messages (and their images) as a racer conversation
    reply       a choice's speculative statistics, per-token sources, stop sequences
    worker      the engine thread and its bounded, in-order queue
    generate    what a request does on the engine thread
    server      the Starlette routes, server-sent events
    service     uvicorn, the socket, the headless log
    monitor     the live Textual monitor
    ray_replicas  the same app as Ray Serve replicas (--ray-address, --replicas)

Needs the `api` extra (Starlette, uvicorn, sse-starlette, pydantic), replicas the
`serve` extra (Ray Serve); torch is imported only by the engine, when the command
(or a replica) loads the model.
"""
