#!/bin/bash
set -e
printf '[server]\nport = 8080\ndebug = false\n\n[database]\nhost = db.internal\nname = orders\n' > /app/service.ini
