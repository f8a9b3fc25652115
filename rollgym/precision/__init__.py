"""rollgym.precision: serve in a lower precision only behind a measured red line.

``rollgym eval`` plays held-out seeds at the training precision and, with ``--precision``,
at a lower one (``measure``), prints both success rates with intervals and the KL between
them, and writes the verdict the server requires (``rollgym.contract.precision``).
"""
