# Converted from RADICAL-Pilot (https://github.com/radical-cybertools/radical.pilot), docs/source/tutorials/app_scheduling.ipynb at commit f9549f6f0e9c (devel, 2025-11-19).
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

import time
import copy
import pprint

import pilotfish.rp as rp
import radical.utils as ru


session = rp.Session()

pmgr = rp.PilotManager(session)
tmgr = rp.TaskManager(session)

pilot = pmgr.submit_pilots(rp.PilotDescription(
    {'resource': 'local.localhost',
     'runtime' : 60,
     'nodes'   : 4}))

tmgr.add_pilots(pilot)
pilot.wait([rp.PMGR_ACTIVE, rp.FAILED])

assert pilot.state == rp.PMGR_ACTIVE

print('pilot is active (%s)' % pilot.state)


# inspect the nodelist
nodelist = pilot.nodelist
print('#nodes : ', len(nodelist.nodes))
print('uniform: ', nodelist.uniform)
print('cpn    : ', nodelist.cores_per_node)
print('gpn    : ', nodelist.gpus_per_node)

# inspect one node
node = nodelist.nodes[0]
pprint.pprint(node.as_dict())


slot_1 = rp.Slot(node_index=0, node_name='localhost', cores=[3])
slot_2 = rp.Slot(node_index=0, node_name='localhost', cores=[4])

td_1 = rp.TaskDescription({'executable': 'radical-pilot-hello.sh', 
                           'arguments' : [1],
                           'ranks'     : 2,
                           'slots'     : [slot_1, slot_2]})  # <--- this is new

task_1 = tmgr.submit_tasks(td_1)
tmgr.wait_tasks(uids=task_1.uid)

pprint.pprint(task_1.slots)
print(task_1.stdout)


sbox = ru.Url(task_1.sandbox).path
tid  = task_1.uid
_ipy_system('cat {sbox}/{tid}.rf', globals())


rr = rp.RankRequirements(n_cores=1)
slot_3 = node.find_slot(rr)

assert slot_3
pprint.pprint(slot_3.as_dict())


pprint.pprint(node.as_dict())


node.allocate_slot(slot_1)
node.allocate_slot(slot_2)

pprint.pprint(node.as_dict())


# deallocate all used slots
node.deallocate_slot(slot_1)
node.deallocate_slot(slot_2)
node.deallocate_slot(slot_3)

pprint.pprint(node.as_dict())


rr = rp.RankRequirements(n_cores=4, n_gpus=1, gpu_occupation=0.5)
slots = nodelist.find_slots(rr, n_slots=4)

for slot in slots:
    print('index:', slot.node_index, 'cores:', slot.cores, 'gpus:', slot.gpus)


nodelist.release_slots(slots)


# ------------------------------------------------------------------------------
#
class AppScheduler(object):

    def __init__(self, tmgr, nodelist):
        '''
        tmgr    : task manager which handles execution of tasks
        nodelist: resources to be used for task execution
        '''
        self._tmgr            = tmgr
        self._nodelist        = nodelist
        self._running_tasks   = dict()
        self._completed_tasks = list()
        self._slots           = dict()

        self._tmgr.register_callback(self._state_cb)

    def _state_cb(self, task, state):
        '''handle task state transitions, specifically for final states'''
        if state in rp.FINAL and task.uid in self._running_tasks:
            print('---> %s: %s' % (task.uid, state))
            assert state == rp.DONE
            self._nodelist.release_slots(self._slots[task.uid])
            del self._running_tasks[task.uid]
            self._completed_tasks.append(task)

    def wait_tasks(self, uids=None, timeout=None):
        '''wait for a set of (or all) tasks for a certain time (or forever)'''
        if not uids:
            uids = list(self._running_tasks.keys())
        print('waiting  : %s' % uids)
        states = self._tmgr.wait_tasks(uids=uids, timeout=timeout)
        return states

    def submit(self, tds):
        '''tds: list of rp.TaskDescriptions - list of tasks to run'''
        while tds:

            print('===========================================================')

            # find slots for all task descriptions
            allocated = list()
            not_allocated = list()

            for td in tds:
                rr = rp.RankRequirements(n_cores=td.cores_per_rank,
                                         n_gpus=td.gpus_per_rank,
                                         mem=td.mem_per_rank,
                                         lfs=td.lfs_per_rank)
                slots = nodelist.find_slots(rr, n_slots=td.ranks)
                if slots:
                    # this task can be submitted
                    td.slots = slots
                    allocated.append(td)
                    self._slots[td.uid] = slots
                else:
                    # this task has to be retries later on
                    not_allocated.append(td)

            # submit all tasks for which resources were found
            submitted = tmgr.submit_tasks(allocated)
            for task in submitted:
                self._running_tasks[task.uid] = task
                self._running_tasks[task.uid] = task
            
            print('submitted: %s' % [task.uid for task in allocated])
            print('pending  : %s' % [td.uid   for td   in not_allocated]) 

            if not_allocated:

                if not self._running_tasks:
                    # no tasks are running - the remaining tasks will never be
                    # able to run, so we have to give up
                    td = not_allocated[0]
                    pprint.pprint(td.as_dict())
                    for node in self._nodelist.nodes:
                        pprint.pprint(node.as_dict())
                    raise ValueError('can never allocate %s' % td.uid)

                # could not submit all tasks - wait for resources to become available
                # on and attempt to schedule the remaining tasks in the next iteration
                while True:
                    states = self.wait_tasks(timeout=5.0)

                    # if we got any free resources, try to schedule more tasks
                    if rp.DONE in states or rp.FAILED in states:
                        break

            time.sleep(3)
            tds = not_allocated


# ------------------------------------------------------------------------------
#
tds = list()
for i in range(16):
    td = {'executable'     : 'sleep',
          'arguments'      : [2],
          'ranks'          : i + 1,   # submit larger and larger tasks
          'cores_per_rank' : 1, 
          'uid'            : 't.%02d' % i}
    tds.append(rp.TaskDescription(td))

scheduler = AppScheduler(tmgr, nodelist)
scheduler.submit(tds)
scheduler.wait_tasks()

print('=== all tasks completed ===')


nodelist_1 = copy.deepcopy(nodelist)
nodelist_2 = copy.deepcopy(nodelist)

nodelist_1.nodes = nodelist_1.nodes[:2]  # first two nodes
nodelist_2.nodes = nodelist_1.nodes[2:]  # remaining nodes

scheduler_1 = AppScheduler(tmgr, nodelist_1)
scheduler_2 = AppScheduler(tmgr, nodelist_2)


node = rp.Node({'name'    : 'localhost',
                'cores'   : [rp.RO(index=x, occupation=rp.FREE) for x in range(8)],
                'gpus'    : [rp.RO(index=x, occupation=rp.FREE) for x in range(2)]})

pprint.pprint(node.as_dict())


ndm = rp.NumaDomainMap({0: rp.NumaDomain(cores=range( 0, 4), gpus=[0]),
                        1: rp.NumaDomain(cores=range( 4, 8), gpus=[1])})

numa_node = rp.NumaNode(node, ndm)
pprint.pprint(numa_node.as_dict())


slot_1 = node.find_slot(rp.RankRequirements(n_cores=3))
slot_2 = numa_node.find_slot(rp.RankRequirements(n_cores=2, n_gpus=1, numa=True))
print(slot_1)
print(slot_2)

pprint.pprint(numa_node.as_dict())
