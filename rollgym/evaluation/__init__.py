"""``rollgym eval``: held-out success of a model or a running server, and the precision red line.

``commands`` is the command: success per sample and pass@k on held-out seeds, with 95%
intervals. With ``--precision`` it plays the seeds at the training precision and at a
lower one (``measure``), prints both success rates and the KL between them, and writes the
verdict the server requires before it serves the lower one (``rollgym.contract.precision``,
checked by ``rollgym.engine.precision``).
"""
