# Converted from RADICAL-Pilot (https://github.com/radical-cybertools/radical.pilot), docs/source/tutorials/raptor_mpi.ipynb at commit f9549f6f0e9c (devel, 2025-11-19).
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

_ipy_env('RADICAL_REPORT=TRUE', globals())
# do not use animated output in notebooks
_ipy_env('RADICAL_REPORT_ANIME=FALSE', globals())


import os

import pilotfish.rp as rp
import radical.utils as ru

# determine the path of the currently active ve to simplify some examples below
ve_path = os.path.dirname(os.path.dirname(ru.which('python3')))

# create session and managers
session = rp.Session()
pmgr    = rp.PilotManager(session)
tmgr    = rp.TaskManager(session)

# submit a pilot
pilot = pmgr.submit_pilots(rp.PilotDescription({'resource'     : 'local.localhost',
                                                'cores'        : 4,
                                                'runtime'      : 30,
                                                'exit_on_error': False}))

# add the pilot to the task manager and wait for the pilot to become active
tmgr.add_pilots(pilot)
pilot.wait(rp.PMGR_ACTIVE)


raptor_descr = {'mode'        : rp.RAPTOR_MASTER,
                'named_env'   : 'rp'}
worker_descr = {'mode'        : rp.RAPTOR_WORKER,
                'ranks'       : 2,
                'named_env'   : 'rp',
                'raptor_class': 'MPIWorker'}

raptor = pilot.submit_raptors([rp.TaskDescription(raptor_descr)])[0]
raptor.submit_workers([rp.TaskDescription(worker_descr),
                       rp.TaskDescription(worker_descr)])


@rp.pythontask
def func_mpi(comm, msg, sleep=2):
    import time
    print('hello %d/%d: %s' % (comm.rank, comm.size, msg))
    time.sleep(sleep)
    return 'func_mpi retval'


# create a minimal MPI function task
td = rp.TaskDescription({'mode'    : rp.TASK_FUNCTION,
                         'ranks'   : 2,
                         'function': func_mpi(None, msg='mpi_task.0')})
mpi_task = raptor.submit_tasks([td])[0]


tmgr.wait_tasks([mpi_task.uid])
print('id: %s [%s]:\n    out: %s\n    ret: %s\n'
     % (mpi_task.uid, mpi_task.state, mpi_task.stdout, mpi_task.return_value))


session.close()
