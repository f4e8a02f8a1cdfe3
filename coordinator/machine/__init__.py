"""What the coordinator asks of the machine it runs on: child processes and ports.

children
    Start, lower and stop child processes that never outlive the coordinator; ``python -P -m``
    command lines.
offload
    Run a blocking function in a low-priority child process without blocking the event loop.
ports
    The one home of port probing: free ports and port blocks, a taken port refused before
    anything starts, and waiting until a server accepts connections.
"""
