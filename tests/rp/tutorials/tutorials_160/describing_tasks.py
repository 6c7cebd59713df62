# Converted from RADICAL-Pilot (https://github.com/radical-cybertools/radical.pilot), docs/source/tutorials/describing_tasks.ipynb at v1.60.0.
# RADICAL-Pilot is MIT-licensed, Copyright (C) 2011-2023 by the RADICAL-Cybertools Team:
# see tests/rp/tutorials/LICENSE.radical.pilot. The notebook's code cells, in order.
# Changed: only the import line (`import radical.pilot as rp` -> `import pilotfish.rp as rp`).

def display(*objs):  # IPython's display(), as text (convert.py)
    print(*objs)


import radical.utils as ru

mpi_lm_exists = bool(ru.which(['mpirun', 'mpiexec']))


import os
import sys
import pprint

# do not use animated output in notebooks
os.environ['RADICAL_REPORT_ANIME'] = 'False'

import pilotfish.rp as rp
# determine the path of the currently active virtualenv to simplify some examples below
ve_path = os.path.dirname(os.path.dirname(ru.which('python3')))
display(ve_path)


# configure reporter output 
report = ru.Reporter(name='radical.pilot')
report.title('Tutorial: Describing Tasks (RP version %s)' % rp.version)

# create session and managers
session = rp.Session()
pmgr    = rp.PilotManager(session)
tmgr    = rp.TaskManager(session)

# submit a pilot
pilot = pmgr.submit_pilots(rp.PilotDescription({'resource'     : 'local.localhost', 
                                                'runtime'      : 60, 
                                                'cores'        : 32, 
                                                'gpus'         : 1, 
                                                'exit_on_error': True}))

# add the pilot to the task manager and wait for the pilot to become active
tmgr.add_pilots(pilot)
pilot.wait(rp.PMGR_ACTIVE)
report.info('pilot state: %s' % pilot.state)


# create a minimal executable task
td   = rp.TaskDescription({'executable': '/bin/date'})
task = tmgr.submit_tasks(td)


tmgr.wait_tasks()


report.plain('uid             : %s\n' % task.uid)
report.plain('tmgr            : %s\n' % task.tmgr.uid)
report.plain('pilot           : %s\n' % task.pilot)
report.plain('name            : %s\n' % task.name)
report.plain('executable      : %s\n' % task.description['executable'])
report.plain('state           : %s\n' % task.state)
report.plain('exit_code       : %s\n' % task.exit_code)
report.plain('stdout          : %s\n' % task.stdout.strip())
report.plain('stderr          : %s\n' % task.stderr)
report.plain('return_value    : %s\n' % task.return_value)
report.plain('exception       : %s\n' % task.exception)
report.plain('\n')
report.plain('endpoint_fs     : %s\n' % task.endpoint_fs)
report.plain('resource_sandbox: %s\n' % task.resource_sandbox)
report.plain('session_sandbox : %s\n' % task.session_sandbox)
report.plain('pilot_sandbox   : %s\n' % task.pilot_sandbox)
report.plain('task_sandbox    : %s\n' % task.task_sandbox)
report.plain('client_sandbox  : %s\n' % task.client_sandbox)
report.plain('metadata        : %s\n' % task.metadata)


import string
letters = string.ascii_lowercase + string.ascii_uppercase

report.progress_tgt(len(letters), label='create')

tds = list()
for letter in letters:
    tds.append(rp.TaskDescription({'executable': '/bin/date',
                                   'arguments': ['-' + letter]}))
    report.progress()

report.progress_done()

tasks = tmgr.submit_tasks(tds)


tmgr.wait_tasks([task.uid for task in tasks])

for task in tasks:
    if task.state == rp.DONE:
        print('%s: %s: %s' % (task.uid, task.description['arguments'], task.stdout.strip()))


tmgr.wait_tasks([task.uid for task in tasks])

for task in tasks:
    if task.state == rp.FAILED:
        print('%s: %s: %s' % (task.uid, task.description['arguments'], task.stderr.strip()))


tds = list()
for n in range(4):
    ranks = (n + 1) if mpi_lm_exists else 1
    tds.append(rp.TaskDescription({'executable'    : ve_path + '/bin/radical-pilot-hello.sh',
                                   'arguments'     : [n + 1], 
                                   'ranks'         : ranks, 
                                   'cores_per_rank': (n + 1),
                                   'threading_type': rp.OpenMP}))
    report.progress()

report.progress_done()

tasks = tmgr.submit_tasks(tds)
tmgr.wait_tasks([task.uid for task in tasks])

for task in tasks:
    print('--- %s:\n%s\n' % (task.uid, task.stdout.strip()))



td = rp.TaskDescription({'executable'    : '/bin/sh',
                         'arguments'     : ['-c', 'cat input.dat | wc > output.dat'],
                         'stdout'        : 'task_io.out',
                         'stderr'        : 'task_io.err',
                         'input_staging' : [{'source': '/etc/passwd', 'target': 'input.dat'}],
                         'output_staging': [{'source': 'output.dat',  'target': '/tmp/output.test.dat'},
                                            {'source': 'task_io.out', 'target': '/tmp/output.test.out'},
                                            {'source': 'task_io.err', 'target': '/tmp/output.test.err'}]
                        })
task = tmgr.submit_tasks(td)
tmgr.wait_tasks([task.uid])

# let's check the resulting output files
print(ru.sh_callout('ls -la /tmp/output.test.*', shell=True)[0])
print(ru.sh_callout('cat    /tmp/output.test.dat')[0])


td = rp.TaskDescription({'executable' : '/bin/sh',
                         'arguments'  : ['-c', 'printf "FOO=$FOO\nBAR=$BAR\nSHELL=$SHELL\n"; env | grep RP_ | sort'],
                         'environment': {'FOO': 'foo', 'BAR': 'bar'}
                        })
task = tmgr.submit_tasks(td)
tmgr.wait_tasks([task.uid])
print(task.stdout)


td = rp.TaskDescription({'pre_exec'   : ['. %s/bin/activate' % ve_path, 
                                         'pip install pyyaml'],
                         'executable' : '/bin/sh',
                         'arguments'  : ['-c', 'which python3; pip show pyyaml'],
                        })
task = tmgr.submit_tasks(td)
tmgr.wait_tasks([task.uid])
print(task.stdout)



pilot.prepare_env(env_name='test_env', 
                  env_spec={'type' :  'venv', 
                            'setup': ['psutil']})

td = rp.TaskDescription({'executable' : '/bin/sh',
                         'arguments'  : ['-c', 'which python3; pip list | grep psutil'],
                         'named_env'  : 'test_env'
                        })
task = tmgr.submit_tasks(td)
tmgr.wait_tasks([task.uid])
print(task.stdout)


report.header('finalize')
session.close()
