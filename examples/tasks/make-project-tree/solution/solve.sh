#!/bin/bash
set -e
for d in src tests docs; do mkdir -p /app/project/$d; echo "$d" > /app/project/$d/README.md; done
