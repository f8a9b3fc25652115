#!/bin/bash
set -e
printf '{"name": "worker", "timeout": 30, "retries": 3}\n' > /app/config.json
