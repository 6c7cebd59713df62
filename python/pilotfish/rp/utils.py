"""RP's rp.utils functions for resource configs: get_resource_config(resource, schema=None),
get_resource_job_url(resource, schema=None), get_resource_fs_url(resource, schema=None) --
from the user's RP site files ($RADICAL_CONFIG_USER_DIR or $HOME, then
.radical/pilot/configs/resource_<site>.json, RP's form) or pilotfish's resource table."""

from ._resources import (
    ResourceConfig,
    get_resource_config,
    get_resource_fs_url,
    get_resource_job_url,
    list_resources,
    user_config_dir,
)

__all__ = [
    "ResourceConfig",
    "get_resource_config",
    "get_resource_fs_url",
    "get_resource_job_url",
    "list_resources",
    "user_config_dir",
]
