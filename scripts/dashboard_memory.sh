#!/usr/bin/env bash
# One dashboard process's memory: start it, open the Tour, then the Ablations page (default run), each in a session
# of scripts.hall.session_client, and print its resident set, PSS and whether libtorch is mapped after each.
#   bash scripts/dashboard_memory.sh   (docs/serving.md, "Why the dashboard processes later stood at 2.3 GB")
set -uo pipefail
cd "$(dirname "$0")/.."
.venv/bin/streamlit run app/main.py --server.port 8599 --server.headless true >/tmp/mem_st.log 2>&1 & PID=$!
for i in $(seq 60); do curl -sf http://localhost:8599/_stcore/health >/dev/null && break; sleep 1; done
for link in / /ablations; do
.venv/bin/python -c "
import asyncio,random
from scripts.hall.session_client import Session
s=Session('http://localhost:8599',random.Random(0),(1,1),120,link='$link')
print('$link', asyncio.run(s.open()), s.errors)"
echo "after $link: $(grep VmRSS /proc/$PID/status) $(grep ^Pss: /proc/$PID/smaps_rollup) libtorch maps: $(grep -c libtorch /proc/$PID/maps)"
done
kill $PID; wait $PID 2>/dev/null
