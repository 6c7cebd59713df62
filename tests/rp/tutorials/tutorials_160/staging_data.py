# Converted from RADICAL-Pilot (https://github.com/radical-cybertools/radical.pilot), docs/source/tutorials/staging_data.ipynb at v1.60.0.
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

_ipy_env('RADICAL_REPORT_ANIME=FALSE', globals())


import pilotfish.rp as rp
import radical.utils as ru


session = rp.Session()
pmgr    = rp.PilotManager(session=session)
tmgr    = rp.TaskManager(session=session)


import os

input_dir = os.path.join(os.getcwd(), 'input_dir')
os.makedirs(input_dir, exist_ok=True)

with open(input_dir + '/input.txt', 'w') as f:
    f.write('Staged data (task_id=$RP_TASK_ID | pilot_id=$RP_PILOT_ID | session_id=$RP_SESSION_ID)')


# Staging directives for the pilot.

pd = rp.PilotDescription({
    'resource'     : 'local.localhost',
    'cores'        : 2,
    'runtime'      : 15,
    'input_staging': [input_dir],
    'exit_on_error': False
})

# The staging directive above lists a single directory name.
# This will automatically be expanded to:
#
#    {'source' : 'client:///input_dir',
#     'target' : 'pilot:///input_dir',
#     'action' : rp.TRANSFER,
#     'flags'  : rp.CREATE_PARENTS|rp.RECURSIVE}

pilot = pmgr.submit_pilots(pd)
tmgr.add_pilots(pilot)


# Staging directives for tasks.

N_TASKS = 2
tds     = []  # list of task descriptions
outputs = []  # list of file names, which are tasks' outputs

for idx in range(N_TASKS):
    output = 'output.%d.txt' % idx

    td = rp.TaskDescription({
        'executable'    : '/bin/echo',
        'arguments'     : ['$(cat input.txt)'],
        'stdout'        : output,
        # link file from the pilot sandbox to the task sandbox
        'input_staging' : [{'source': 'pilot:///input_dir/input.txt',
                            'target': 'task:///input.txt',
                            'action': rp.LINK}],
        # copy task's output file to the pilot sandbox
        'output_staging': [{'source': 'task:///%s'  % output,
                            'target': 'pilot:///%s' % output,
                            'action': rp.COPY}]
    })

    tds.append(td)
    outputs.append(output)

tmgr.submit_tasks(tds)
tmgr.wait_tasks()


# Staging data from the pilot sandbox to the client working directory

pilot.stage_out([{'source': 'pilot:///%s'             % output,
                  'target': 'client:///output_dir/%s' % output,
                  'action': rp.TRANSFER} for output in outputs])


_ipy_system('cat output_dir/*', globals())


session.close(cleanup=True)
