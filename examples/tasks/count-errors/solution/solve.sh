#!/bin/bash
set -e
awk '$3 == "ERROR"' /app/server.log | wc -l | tr -d ' ' > /app/errors.txt
