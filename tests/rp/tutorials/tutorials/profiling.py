# Converted from RADICAL-Pilot (https://github.com/radical-cybertools/radical.pilot), docs/source/tutorials/profiling.ipynb at commit f9549f6f0e9c (devel, 2025-11-19).
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

_ipy_env('RADICAL_PROFILE=TRUE', globals())
_ipy_env('RADICAL_REPORT=TRUE', globals())
_ipy_env('RADICAL_REPORT_ANIME=FALSE', globals())


import os
import random
import pilotfish.rp as rp
session = rp.Session()
pmgr    = rp.PilotManager(session=session)
tmgr    = rp.TaskManager(session=session)
pdesc   = rp.PilotDescription({'resource'     : 'local.localhost',
                               'cores'        : 4,
                               'gpus'         : 0,
                               'runtime'      : 30,  # pilot max runtime in minutes
                               'exit_on_error': False})
pilot   = pmgr.submit_pilots(pdesc)
tmgr.add_pilots(pilot)

n = 10
tds = list()

for i in range(n):

    td = rp.TaskDescription()
    td.executable     = 'radical-pilot-hello.sh'
    td.arguments      = [random.randint(1, 10)]
    td.ranks          =  1
    td.cores_per_rank =  random.randint(1, 2)
    tds.append(td)

tmgr.submit_tasks(tds)
tmgr.wait_tasks()

session.close()


_ipy_env('SESSION_ID=$session.uid', globals())


_ipy_system('cat ~/radical.pilot.sandbox/$SESSION_ID/pilot.0000/task.000000/task.000000.prof', globals())


_ipy_sp.run(['bash', '-c', '\nfor trace in `find ~/radical.pilot.sandbox/$SESSION_ID/pilot.0000/ -type f -name  "task.*.prof"`; do \\\n    time_stamp=`grep \'app_start\' $trace`      ; \\\n    IFS=, read -a fields <<<"$time_stamp"     ; \\\n    start_time=`date -d  @${fields[0]} +\'%c\'` ; \\\n    echo ${fields[4]}: $start_time            ; \\\ndone'])


_ipy_sp.run(['bash', '-c', '\nfor trace in `find ~/radical.pilot.sandbox/$SESSION_ID/pilot.0000/ -type f -name  "task.*.prof"`; do \\\n    start=`grep \'app_start\' $trace`; stop=`grep \'app_stop\' $trace`      ; \\\n    IFS=, read -a fields_start <<<"$start"                              ; \\\n    IFS=, read -a fields_stop <<<"$stop"                                ; \\\n    start_time=`date -d  @${fields_start[0]} +\'%r\'`                     ; \\\n    stop_time=`date -d  @${fields_stop[0]} +\'%r\'`                       ; \\\n    echo ${fields_start[4]} \\-\\> start: $start_time \\| stop: $stop_time ; \\\ndone'])
