#!/usr/bin/env python3
# Converted from RADICAL-Pilot (https://github.com/radical-cybertools/radical.pilot), examples/misc/rp_app_master.py at commit f9549f6f0e9c.
# RADICAL-Pilot is MIT-licensed, Copyright (C) 2011-2023 by the RADICAL-Cybertools Team:
# see tests/rp/tutorials/LICENSE.radical.pilot. The script as it is.
# Changed: only the import line (`import radical.pilot as rp` -> `import pilotfish.rp as rp`).

import os
import sys

import threading

import radical.utils as ru


# ------------------------------------------------------------------------------
#
def log(msg):

    sys.stdout.write('%s\n' % msg)
    sys.stdout.flush()


# ------------------------------------------------------------------------------
#
if __name__ == '__main__':

    uid       = os.environ['RP_TASK_ID']
    addr_work = os.environ['RP_WORK_QUEUE_IN']
    addr_res  = os.environ['RP_RESULT_QUEUE_OUT']

    n_clients = int(sys.argv[1])
    term      = threading.Event()
    term_cnt  = 0

    work_queue   = ru.Putter('RP_WORK_QUEUE',   addr_work)
    result_queue = ru.Getter('RP_RESULT_QUEUE', addr_res)

    for i in range(1000):
        log('> %06d ?' % (i))
        work_queue.put(i)

    for i in range(1000):
        result = result_queue.get()
        log('< %06d : %s' % (i, result))

    for i in range(n_clients):
        log('x %02d QUIT' % i)
        work_queue.put('QUIT')

    log('m DONE %s')
    sys.exit()


# ------------------------------------------------------------------------------

