#!/bin/bash
# The verifier: runs as its own user once the agent is gone; reward 1 if check.py passes.
mkdir -p /logs/verifier
if python3 /tests/check.py; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
