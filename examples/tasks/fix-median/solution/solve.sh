#!/bin/bash
set -e
sed -i 's/ordered\[middle + 1\]/ordered[middle - 1]/' /app/stats.py
