"""Observing the server: what it measures, and where a client sees it.

Everything here listens (to the engine's generations, the buffer, the loop) and never
steers; ``/metrics`` and ``/dashboard`` read it.

    metrics.py     ServerMetrics: the Prometheus registry (the sandboxes' and the engine's
                   sinks on it)
    observed.py    ObservedEngine: every generation handed to observers (metrics, the
                   dashboard, the cost board)
    timing.py      ServerTiming: each answer's Server-Timing header (engine vs HTTP time)
    event_loop.py  watch_loop: how late the event loop wakes
    cost.py        CostMeter: the cost board (tokens/s, device-seconds, savings)
"""
