"""The live dashboard: where the loop's time goes, in a browser (``GET /dashboard``).

The page (``index.html``, ``dashboard.js``, ``dashboard.css``: package data, plain SVG, no
CDN) polls ``GET /dashboard/data`` every two seconds and draws the four stages' busy and
waiting time over time, environment vs model latency percentiles, buffer depth, the
version-lag histogram, dropped samples and the reward curve.

    intervals.py   IntervalSet: many spans merged into disjoint intervals (busy time)
    quantiles.py   percentiles from the server's Prometheus histograms
    recorder.py    DashboardRecorder: the stages' spans (an observer of the engine and the
                   buffer), periodic readings, the views
    sampler.py     read the server every interval_s while the app runs

What the trainer posts (``TrainerReport``) and what the page gets (``DashboardData``) are
``rollgym.contract.dashboard``; the routes are ``server.routes.dashboard``.
"""
