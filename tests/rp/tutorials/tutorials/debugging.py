# Converted from RADICAL-Pilot (https://github.com/radical-cybertools/radical.pilot), docs/source/tutorials/debugging.ipynb at commit f9549f6f0e9c (devel, 2025-11-19).
# RADICAL-Pilot is MIT-licensed, Copyright (C) 2011-2023 by the RADICAL-Cybertools Team:
# see tests/rp/tutorials/LICENSE.radical.pilot. The notebook's code cells, in order, its IPython magics as Python (the _ipy_* helpers).
# Changed: only the import line (`import radical.pilot as rp` -> `import pilotfish.rp as rp`).

# -- IPython's magics as Python (convert.py) --------------------------------------------------
import os as _ipy_os, re as _ipy_re, subprocess as _ipy_sp


def _ipy_expand(text, ns):
    """IPython's expansion of a magic's line: {expr}, and $name(.attr) of a Python name; the
    line as it is where that fails (as IPython's var_expand)."""
    try:
        return _ipy_expand1(text, ns)
    except Exception:
        return text


def _ipy_expand1(text, ns):
    text = _ipy_re.sub(r"\{([^{}]+)\}", lambda m: str(eval(m.group(1), ns)), text)

    def dollar(m):
        name, *attrs = m.group(1).split(".")
        if name not in ns:
            return m.group(0)
        v = ns[name]
        for a in attrs:
            v = getattr(v, a)
        return str(v)
    return _ipy_re.sub(r"(?<![$\\])\$([A-Za-z_][\w.]*\w|[A-Za-z_])", dollar, text)


def _ipy_system(cmd, ns):
    _ipy_sp.run(_ipy_expand(cmd, ns), shell=True, executable="/bin/bash")


def _ipy_env(assign, ns):
    key, _, value = assign.partition("=")
    _ipy_os.environ[key.strip()] = _ipy_expand(value.strip(), ns)


def _ipy_cd(path, ns):
    _ipy_os.chdir(_ipy_os.path.expanduser(_ipy_expand(path.strip(), ns)))
# ----------------------------------------------------------------------------------------------

_ipy_env('RADICAL_LOG_LVL=DEBUG', globals())

_ipy_env('RADICAL_REPORT=TRUE', globals())
_ipy_env('RADICAL_REPORT_ANIME=FALSE', globals())



import pilotfish.rp as rp
import radical.utils as ru

client_sandbox = None
pilot_sandbox  = None

with rp.Session() as session:

    pmgr  = rp.PilotManager(session=session)
    tmgr  = rp.TaskManager(session=session)
    
    pilot = pmgr.submit_pilots(
        rp.PilotDescription({'resource'     : 'local.localhost', 
                             'cores'        : 4,
                             'runtime'      : 10,
                             'exit_on_error': False}))
    tmgr.add_pilots(pilot)

    td_1  = rp.TaskDescription({'executable': 'date'})
    td_2  = rp.TaskDescription({'executable': 'data'})  # <- unknown executable
    tasks = tmgr.submit_tasks([td_1, td_2])
    tmgr.wait_tasks()

    client_sandbox = ru.Url(pilot.client_sandbox).path + '/' + session.uid
    pilot_sandbox  = ru.Url(pilot.pilot_sandbox).path

for task in tasks:
    print('%s: %s' % (task.uid, task.state))
print('client sandbox: %s' % client_sandbox)
print('pilot  sandbox: %s' % pilot_sandbox)


import os

import pilotfish.rp as rp
for task in tasks:
    if task.state == rp.FAILED:
        print('%s stderr: %s' % (task.uid, task.stderr))
    elif task.state == rp.DONE:
        print('%s stdout: %s' % (task.uid, task.stdout))


tid = tasks[1].uid

_ipy_cd('$pilot_sandbox/$tid', globals())

_ipy_system('ls -l', globals())
_ipy_system('cat "$tid".err', globals())



_ipy_cd('$client_sandbox', globals())
_ipy_system("grep 'ERROR' *log", globals())
_ipy_system('ls -l *.out *.err', globals())



_ipy_cd('$pilot_sandbox', globals())
_ipy_system("grep 'ERROR' *log", globals())
_ipy_system('ls -l *.out *.err', globals())
