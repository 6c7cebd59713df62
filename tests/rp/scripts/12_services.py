#!/usr/bin/env python3
"""Agent services: started before any task of the pilot, up once their startup file exists;
tasks then talk to them (RP's agent_services)."""

import os
import sys

import pilotfish.rp as rp

SERVICE = r"""
import os, socket
# an abstract socket (no path-length limit), named after the session and pilot
path = "\0upper." + os.environ["RP_SESSION_ID"] + "." + os.environ["RP_PILOT_ID"]
srv = socket.socket(socket.AF_UNIX)
srv.bind(path)
srv.listen(64)
open("ready", "w").write(path[1:] + "\n")   # the startup file: the service is up
while True:
    c, _ = srv.accept()
    c.sendall(c.recv(1024).upper())
    c.close()
"""

CLIENT = r"""
import os, socket
c = socket.socket(socket.AF_UNIX)
c.connect("\0upper." + os.environ["RP_SESSION_ID"] + "." + os.environ["RP_PILOT_ID"])
c.sendall(os.environ["RP_TASK_ID"].encode())
print(c.recv(1024).decode())
"""

if __name__ == "__main__":
    resource = sys.argv[1] if len(sys.argv) > 1 else "local.localhost"
    session = rp.Session()
    try:
        pmgr = rp.PilotManager(session)
        tmgr = rp.TaskManager(session)
        sd = rp.TaskDescription({"executable": "python3", "arguments": ["-c", SERVICE],
                                 "named_env": "rp", "metadata": {"startup_file": "ready"}})
        pdesc = rp.PilotDescription({"resource": resource, "cores": 4, "runtime": 10})
        pdesc["services"].append(sd)
        pilot = pmgr.submit_pilots(pdesc)
        tmgr.add_pilots(pilot)
        tds = [rp.TaskDescription({"executable": "python3", "arguments": ["-c", CLIENT],
                                   "named_env": "rp", "stage_on_error": True})
               for _ in range(8)]
        tasks = tmgr.submit_tasks(tds)  # waits for the services to be up
        tmgr.wait_tasks()
        for t in tasks:
            assert t.state == rp.DONE, (t.state, t.exception_detail)
            assert t.stdout.strip() == t.uid.upper(), t.stdout
        (service,) = pilot.services
        assert service.state == rp.AGENT_EXECUTING  # it stays up until the pilot ends
        print("OK", os.path.basename(__file__))
    finally:
        session.close()
