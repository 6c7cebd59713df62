# Converted from RADICAL-Pilot (https://github.com/radical-cybertools/radical.pilot), docs/source/tutorials/configuration.ipynb at v1.60.0.
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

resource_tacc_tutorial = \
{
    "frontera_tutorial":
    {
        "description"                 : "Short description of the resource",
        "notes"                       : "Notes about resource usage",

        "default_schema"              : "local",
        "schemas"                     : {
            "local"                   : {
                "job_manager_endpoint": "slurm://frontera.tacc.utexas.edu/",
                "filesystem_endpoint" : "file://frontera.tacc.utexas.edu/"
            },
            "ssh"                     : {
                "job_manager_endpoint": "slurm+ssh://frontera.tacc.utexas.edu/",
                "filesystem_endpoint" : "sftp://frontera.tacc.utexas.edu/"
            },
            "batch"                   : {
                "job_manager_endpoint": "fork://localhost/",
                "filesystem_endpoint" : "file://localhost/"
            },
            "interactive"             : {
                "job_manager_endpoint": "fork://localhost/",
                "filesystem_endpoint" : "file://localhost/"
            },
        },

        "default_queue"               : "production",
        "resource_manager"            : "SLURM",

        "cores_per_node"              : 56,
        "gpus_per_node"               : 0,
        "system_architecture"         : {
                                         "smt"           : 1,
                                         "options"       : ["nvme", "intel"],
                                         "blocked_cores" : [],
                                         "blocked_gpus"  : []
                                        },

        "agent_config"                : "default",
        "agent_scheduler"             : "CONTINUOUS",
        "agent_spawner"               : "POPEN",
        "default_remote_workdir"      : "$HOME",

        "pre_bootstrap_0"             : [
                                         "module unload intel impi",
                                         "module load   intel impi",
                                         "module load   python3/3.9.2"
                                        ],
        "launch_methods"              : {
                                         "order"  : ["MPIRUN"],
                                         "MPIRUN" : {
                                             "pre_exec_cached": [
                                                 "module load TACC"
                                             ]
                                         }
                                        },
        
        "virtenv_mode"                : "local"
    }
}


_ipy_env('RADICAL_REPORT_ANIME=FALSE', globals())


# ensure that the location for user-defined configurations exists
_ipy_system('mkdir -p "${RADICAL_CONFIG_USER_DIR:-$HOME}/.radical/pilot/configs/"', globals())


import os

import pilotfish.rp as rp
import radical.utils as ru


# save earlier defined platform configuration into the user-space
ru.write_json(resource_tacc_tutorial, os.path.join(os.path.expanduser('~'), '.radical/pilot/configs/resource_tacc.json'))


tutorial_cfg = rp.utils.get_resource_config(resource='tacc.frontera_tutorial')

for attr in ['schemas', 'resource_manager', 'cores_per_node', 'system_architecture']:
    print('%-20s : %s' % (attr, tutorial_cfg[attr]))


print('job_manager_endpoint : ', rp.utils.get_resource_job_url(resource='tacc.frontera_tutorial', schema='ssh'))
print('filesystem_endpoint  : ', rp.utils.get_resource_fs_url (resource='tacc.frontera_tutorial', schema='ssh'))


session = rp.Session()
pmgr    = rp.PilotManager(session=session)


tutorial_cfg = session.get_resource_config(resource='tacc.frontera_tutorial', schema='batch')
for attr in ['label', 'launch_methods', 'job_manager_endpoint', 'filesystem_endpoint']:
    print('%-20s : %s' % (attr, ru.as_dict(tutorial_cfg[attr])))


pd = rp.PilotDescription({
    'resource'     : 'tacc.frontera_tutorial',
    'project'      : 'XYZ000',
    'queue'        : 'production',
    'cores'        : 56,
    'runtime'      : 15,
    'access_schema': 'batch',
    'exit_on_error': False
})

pilot = pmgr.submit_pilots(pd)


from pprint import pprint

pprint(pilot.as_dict())


session.close()
