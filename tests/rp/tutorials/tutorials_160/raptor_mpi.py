# Converted from RADICAL-Pilot (https://github.com/radical-cybertools/radical.pilot), docs/source/tutorials/raptor_mpi.ipynb at v1.60.0.
# RADICAL-Pilot is MIT-licensed, Copyright (C) 2011-2023 by the RADICAL-Cybertools Team:
# see tests/rp/tutorials/LICENSE.radical.pilot. The notebook's code cells, in order.
# Changed: only the import line (`import radical.pilot as rp` -> `import pilotfish.rp as rp`).

import os

# do not use animated output in notebooks
os.environ['RADICAL_REPORT_ANIME'] = 'False'

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
                                                'runtime'      : 60, 
                                                'cores'        : 17, 
                                                'exit_on_error': False}))

# add the pilot to the task manager and wait for the pilot to become active
tmgr.add_pilots(pilot)
pilot.wait(rp.PMGR_ACTIVE)
print('pilot is up and running')


pilot.prepare_env(env_name='raptor_ve',
                  env_spec={'type' : 'venv',
                            'path' : '/tmp/raptor_ve',
                            'setup': ['radical.pilot',
                                      'mpi4py']})
print('raptor_ve is ready')


master_descr = {'mode': rp.RAPTOR_MASTER,
                'named_env': 'raptor_ve'}
worker_descr = {'mode': rp.RAPTOR_WORKER,
                'ranks': 10,
                'named_env': 'raptor_ve',
                'raptor_class': 'MPIWorker'}

raptor = pilot.submit_raptors( [rp.TaskDescription(master_descr)])[0]
worker = raptor.submit_workers([rp.TaskDescription(worker_descr), 
                                rp.TaskDescription(worker_descr)])


@rp.pythontask
def func_mpi(comm, msg, sleep=2):
    import time
    print('hello %d/%d: %s' % (comm.rank, comm.size, msg))
    time.sleep(sleep)
    return 'func_mpi retval'


# create a minimal MPI function task
td = rp.TaskDescription({'mode': rp.TASK_FUNCTION,
                         'ranks': 4,
                         'function': func_mpi(None, msg='mpi_task.0')})
mpi_task = raptor.submit_tasks([td])[0]


print(mpi_task)
tmgr.wait_tasks([mpi_task.uid])
print('id: %s [%s]:\n    out:\n%s\n    ret: %s\n'
     % (mpi_task.uid, mpi_task.state, mpi_task.stdout, mpi_task.return_value))


session.close()
