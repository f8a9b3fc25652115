#!/bin/bash
set -e
mkdir -p /app/archive
mv /app/inbox/*.log /app/archive/
