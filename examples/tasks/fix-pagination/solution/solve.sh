#!/bin/bash
set -e
cat > /app/paging.py <<'EOF'
def page_count(items, per_page):
    return -(-items // per_page)
EOF
