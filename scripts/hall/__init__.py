"""The lecture hall: the dashboard served to a class on one link, and tried the way a class tries it.

    .venv/bin/python -m scripts.hall serve [--workers N] [--bind ADDR] [--port PORT] ...     (bash run.sh serve)
    .venv/bin/python -m scripts.hall loadtest [--start single|serve] [--sessions 1,10,25,50] ...
    .venv/bin/python -m scripts.hall faults [--faults links,uploads,live,kill,flood] [--quick] ...

Each command takes the options it always took (`--help` lists them); run them from the project's root, the folder
of run.sh, where `scripts.hall` is found. docs/serving.md says what each one measures and what it measured here.

  serve            N `streamlit run` workers behind HAProxy, sticky per browser, and the live-computation process
  loadtest         simulated students open one shared link together and change the view; open and change times
  faults           the faults a hall meets: hostile links and uploads, a live stampede, a killed worker, a flood
  session_client   a student's browser session over Streamlit's websocket protocol (loadtest, faults, serve's
                   warm-up of each worker)
  fault_class      what every fault run shares: the running serve, students clicking, one row of the report
  fault_inputs, fault_live, fault_flood    the faults themselves
  proxy_log        HAProxy's log as serve keeps it: the workers its health checks marked down, and why
"""
