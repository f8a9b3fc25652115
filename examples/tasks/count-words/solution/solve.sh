#!/bin/bash
set -e
wc -w < /app/text.txt | tr -d ' ' > /app/answer.txt
