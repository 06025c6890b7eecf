"""One-off commands, each run as `.venv/bin/python scripts/NAME.py` (its docstring says what it does), and
`hall/`, the lecture hall's package: serving a class, the load test and the faults (`python -m scripts.hall`)."""
