# Converted from RADICAL-Pilot (https://github.com/radical-cybertools/radical.pilot), docs/source/tutorials/submission.ipynb at v1.60.0.
# RADICAL-Pilot is MIT-licensed, Copyright (C) 2011-2023 by the RADICAL-Cybertools Team:
# see tests/rp/tutorials/LICENSE.radical.pilot. The notebook's code cells, in order.
# Changed: only the import line (`import radical.pilot as rp` -> `import pilotfish.rp as rp`).

import pilotfish.rp as rp
session = rp.Session()
pd_init = {'resource'     : 'tacc.frontera',
           'access_schema': 'ssh'
          }

pdesc = rp.PilotDescription(pd_init)


pd_init = {'resource'     : 'tacc.frontera',
           'access_schema': 'interactive',
           'runtime'      : 6000,
           'exit_on_error': True,
           'project'      : 'myproject',
           'queue'        : 'normal',
           'cores'        : 4096,
           'gpus'         : 0
          }

pdesc = rp.PilotDescription(pd_init)
session.close(cleanup=True)
