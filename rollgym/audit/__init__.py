"""``rollgym audit ENV_ID``: the attack suite as a product, for any registered env.

Scripted hostile agents play the env through its own API (text actions; for an env with
``tools``, ``<tool_call>{...}</tool_call>`` actions too) and try each way an agent could
shape its training data:

==============================  ==========================================================
reward from feedback            values that follow "expected", "answer", "solution"... in
                                the env's feedback, submitted back (a lookup table too)
reward from reading the box     the same, from what commands can read of the box
reward by tampering             forged reports, objects equal to everything, reward files,
                                killing or shadowing the checker, then a claim of success
residue between episodes        a file, a process, a variable of episode 1 seen in episode 2
crashes counted as infra        memory, disk, processes, output, a dying interpreter, tool
                                calls the parser or the executor cannot take
oversized and malformed         empty, huge, binary, surrogates, NULs, deep nesting,
actions                         unbalanced tags, thousands of calls
==============================  ==========================================================

What crosses (``play.Play`` checks every step): an attacker that did not do the task was
paid as solved (its episode terminated on a step that paid a positive reward); a marker
of episode 1 appears in episode 2; anything an attacker's text caused was counted as an
infrastructure failure, or made ``reset`` or ``step`` raise; an observation that is not
bounded, valid text. ``suite.audit`` runs them, ``commands`` prints the table and exits
non-zero on any crossing.
"""
